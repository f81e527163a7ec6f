//! SVG charts of evaluation results (plotters).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::fidelity::Row;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Two panels: mean KL(FullKV || policy) and top-1 agreement against budget, one line per
/// policy.
pub fn fidelity_svg(path: &Path, summary: &[Row]) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plot: {e}");
    let mut policies: Vec<&str> = Vec::new();
    for r in summary {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let bmax = summary.iter().map(|r| r.budget).max().unwrap_or(1) as f64;
    let bmin = summary.iter().map(|r| r.budget).min().unwrap_or(1) as f64;
    let klmax = summary
        .iter()
        .map(|r| r.kl_mean)
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let (left, right) = root.split_horizontally(500);
    type Metric = fn(&Row) -> f64;
    let panels: [(&DrawingArea<_, _>, &str, f64, Metric); 2] = [
        (&left, "mean KL(FullKV || policy)", klmax, |r| r.kl_mean),
        (&right, "top-1 agreement with FullKV", 1.0, |r| {
            r.top1_agreement
        }),
    ];
    for (area, title, ymax, f) in panels {
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((bmin * 0.9)..(bmax * 1.1), 0.0..ymax)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("budget (tokens per layer and head)")
            .draw()
            .map_err(|x| e(&x))?;
        for (i, p) in policies.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = summary
                .iter()
                .filter(|r| r.policy == *p)
                .map(|r| (r.budget as f64, f(r)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(*p)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            chart
                .draw_series(pts.into_iter().map(|pt| Circle::new(pt, 3, color.filled())))
                .map_err(|x| e(&x))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
