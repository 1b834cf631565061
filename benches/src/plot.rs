//! A small SVG line-chart writer for the comparison plots (latency CDFs, throughput against
//! clients): axes with rounded ticks, a linear or logarithmic x axis, one polyline per series and
//! a legend. Self-contained SVG 1.1, viewable in a browser and on GitHub.

use std::fmt::Write;

/// One line of a chart.
pub struct Series {
    pub name: String,
    /// Any SVG colour.
    pub color: String,
    pub dashed: bool,
    /// (x, y) points in drawing order.
    pub points: Vec<(f64, f64)>,
}

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Logarithmic x axis (points with x <= 0 are left out).
    pub log_x: bool,
    pub x_fmt: fn(f64) -> String,
    pub y_fmt: fn(f64) -> String,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;

/// Plain number formatting for tick labels: `0.5`, `20`, `1.5k`, `2M`.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    let (v, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

/// Ticks at 1, 2 or 5 times a power of ten, about `n` of them over [lo, hi].
fn linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    (first..).map(|k| k as f64 * step).take_while(|t| *t <= hi + step * 1e-9).collect()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl Chart {
    pub fn svg(&self) -> String {
        let tx = |x: f64| if self.log_x { x.log10() } else { x };
        let pts = || self.series.iter().flat_map(|s| s.points.iter()).filter(|p| !self.log_x || p.0 > 0.0);
        let (mut x0, mut x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(tx(p.0)), b.max(tx(p.0))));
        let y1 = pts().fold(f64::MIN, |a, p| a.max(p.1));
        if x0 > x1 {
            (x0, x1) = (0.0, 1.0);
        }
        if self.log_x {
            (x0, x1) = (x0.floor(), x1.ceil().max(x0.floor() + 1.0));
        } else if x1 - x0 < 1e-12 {
            x1 = x0 + 1.0;
        }
        let y_ticks = linear_ticks(0.0, if y1 > 0.0 { y1 } else { 1.0 }, 5);
        let y1 = y_ticks.last().copied().unwrap_or(1.0).max(y1);
        let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
        let px = |x: f64| LEFT + (tx(x) - x0) / (x1 - x0) * pw;
        let py = |y: f64| TOP + ph - y / y1 * ph;

        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            escape(&self.title)
        );
        // Grid and ticks.
        let x_ticks: Vec<f64> =
            if self.log_x { (x0 as i32..=x1 as i32).map(|e| 10f64.powi(e)).collect() } else { linear_ticks(x0, x1, 6) };
        for t in &x_ticks {
            let x = px(*t);
            let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + ph);
            let _ = writeln!(
                s,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                TOP + ph + 16.0,
                escape(&(self.x_fmt)(*t))
            );
        }
        for t in &y_ticks {
            let y = py(*t);
            let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, LEFT + pw);
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 4.0,
                escape(&(self.y_fmt)(*t))
            );
        }
        let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            H - 14.0,
            escape(&self.x_label)
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            escape(&self.y_label)
        );
        // Lines and legend.
        for (i, series) in self.series.iter().enumerate() {
            let line: Vec<String> = series
                .points
                .iter()
                .filter(|p| !self.log_x || p.0 > 0.0)
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let dash = if series.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                line.join(" "),
                series.color
            );
            if line.len() == 1 {
                let (x, y) = series.points[0];
                let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#, px(x), py(y), series.color);
            }
            let ly = TOP + 12.0 + 20.0 * i as f64;
            let lx = W - RIGHT + 14.0;
            let _ = writeln!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 24.0,
                series.color,
                lx + 30.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        let t = linear_ticks(0.0, 1.0, 5);
        assert_eq!(t.len(), 6);
        assert!(t.iter().zip([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]).all(|(a, b)| (a - b).abs() < 1e-9), "{t:?}");
        assert_eq!(linear_ticks(0.0, 1000.0, 5), vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        assert_eq!(fmt_num(1500.0), "1.5k");
        assert_eq!(fmt_num(0.25), "0.25");
    }

    #[test]
    fn draws_every_series() {
        let chart = Chart {
            title: "a < b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            x_fmt: fmt_num,
            y_fmt: fmt_num,
            series: vec![
                Series {
                    name: "etcd".into(),
                    color: "blue".into(),
                    dashed: false,
                    points: vec![(10.0, 0.1), (1000.0, 1.0)],
                },
                Series { name: "keel".into(), color: "red".into(), dashed: true, points: vec![(50.0, 0.5)] },
            ],
        };
        let svg = chart.svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt; b"));
        assert!(svg.contains("<circle"));
    }
}
