//! The report's plots: SVG text drawn by plotters' SVG backend (no font file, no system
//! library; labels stay SVG text for the browser to set).

use anyhow::{Result, anyhow};
use plotters::prelude::*;

const SIZE: (u32, u32) = (560, 320);
const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing a plot: {e:?}")
}

/// The range `[lo, hi]` of `v` widened by 5 % (and to a unit span when flat or empty).
fn span(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| (a.min(x), b.max(x)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let pad = 0.05 * (hi - lo);
    (lo - pad, hi + pad)
}

type XyChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// A white canvas with a titled x–y chart of these ranges and axis names.
fn xy_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    title: &str,
    (x, y): (std::ops::Range<f64>, std::ops::Range<f64>),
    x_desc: &str,
    y_desc: &str,
) -> Result<XyChart<'a, 'b>> {
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x, y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// The series' names in a box at the upper right.
fn legend<'a, 'b: 'a>(chart: &mut XyChart<'a, 'b>) -> Result<()> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

/// One line per named series of `(x, y)` points (points marked), with a legend when there are
/// several. Non-finite values are left out (a diverged epoch shows as a gap's end).
pub fn lines(title: &str, x_desc: &str, y_desc: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<String> {
    let pts = || series.iter().flat_map(|s| s.1.iter());
    let (x0, x1) = span(pts().map(|p| p.0));
    let (y0, y1) = span(pts().map(|p| p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = xy_chart(&root, title, (x0..x1, y0..y1), x_desc, y_desc)?;
        for (i, (name, p)) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let p: Vec<(f64, f64)> = p
                .iter()
                .copied()
                .filter(|q| q.0.is_finite() && q.1.is_finite())
                .collect();
            chart
                .draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart
                .draw_series(p.iter().map(|&q| Circle::new(q, 3, c.filled())))
                .map_err(err)?;
        }
        if series.len() > 1 {
            legend(&mut chart)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Grouped vertical bars: one group per category, one bar per named series (a missing value
/// draws no bar), on `[0, y_max]`.
pub fn bars(
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
    y_max: f64,
) -> Result<String> {
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0 + 120, SIZE.1)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
            .map_err(err)?;
        let cats = categories.to_vec();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 {
                    cats.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        let w = 0.8 / k as f64;
        for (j, (name, vals)) in series.iter().enumerate() {
            let c = COLORS[j % COLORS.len()];
            let rects = vals.iter().enumerate().filter_map(|(i, v)| {
                let v = v.filter(|v| v.is_finite())?.clamp(0.0, y_max);
                let x = i as f64 + 0.1 + j as f64 * w;
                Some(Rectangle::new([(x, 0.0), (x + w * 0.95, v)], c.filled()))
            });
            chart
                .draw_series(rects)
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        legend(&mut chart)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Labelled points `(label, x, y)`.
pub fn scatter(title: &str, x_desc: &str, y_desc: &str, points: &[(String, f64, f64)]) -> Result<String> {
    let (x0, x1) = span(points.iter().map(|p| p.1));
    let (y0, y1) = span(points.iter().map(|p| p.2));
    // Room for the labels on the right and above.
    let (x1, y1) = (x1 + 0.25 * (x1 - x0), y1 + 0.08 * (y1 - y0));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        let mut chart = xy_chart(&root, title, (x0..x1, y0..y1), x_desc, y_desc)?;
        for (i, (label, x, y)) in points.iter().enumerate() {
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(std::iter::once(Circle::new((*x, *y), 5, c.filled())))
                .map_err(err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    label.clone(),
                    (*x, *y),
                    ("sans-serif", 13).into_font().color(&BLACK),
                )))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts of an SVG (plotters writes each on its own line).
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split("</text>").next()?.trim().to_string()))
            .collect()
    }

    #[test]
    fn plots_are_svg_with_their_marks() {
        let s = lines("loss", "epoch", "loss", &[("a".into(), vec![(1.0, 0.5), (2.0, 0.25)])]).unwrap();
        assert!(
            s.starts_with("<svg") && s.contains("<circle") && texts(&s).contains(&"loss".to_string()),
            "{s}"
        );
        let cats = ["CA+".to_string(), "QA-".to_string()];
        let one = bars("t", "%", &cats, &[("ERS".into(), vec![Some(10.0), None])], 100.0).unwrap();
        let two = bars("t", "%", &cats, &[("ERS".into(), vec![Some(10.0), Some(20.0)])], 100.0).unwrap();
        assert_eq!(two.matches("<rect").count(), one.matches("<rect").count() + 1);
        assert!(
            texts(&one).contains(&"CA+".into()) && texts(&one).contains(&"QA-".into()),
            "{one}"
        );
        let p = scatter(
            "s",
            "R@1",
            "ERS",
            &[("madry".into(), 0.5, 20.0), ("none".into(), f64::NAN, 1.0)],
        )
        .unwrap();
        assert!(texts(&p).contains(&"madry".into()) && !texts(&p).contains(&"none".into()));
    }
}
