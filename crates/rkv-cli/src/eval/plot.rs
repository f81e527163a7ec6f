//! SVG charts of evaluation results (plotters).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::fidelity::Row;
use super::passkey::Summary;

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
            policy_line(&mut chart, p, color, pts)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// One panel per prompt mode: passkey accuracy (over lengths, depths and trials) against
/// budget, one line per policy, FullKV's accuracy as a dashed black line.
pub fn passkey_svg(path: &Path, summary: &[Summary]) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("plot: {e}");
    let mut policies: Vec<&str> = Vec::new();
    let mut modes: Vec<&str> = Vec::new();
    for s in summary.iter().filter(|s| s.budget.is_some()) {
        if !policies.contains(&s.policy.as_str()) {
            policies.push(&s.policy);
        }
        if !modes.contains(&s.prompt_mode.as_str()) {
            modes.push(&s.prompt_mode);
        }
    }
    // Runs-weighted mean accuracy of the rows `keep` selects.
    let mean = |keep: &dyn Fn(&Summary) -> bool| {
        let (mut hits, mut runs) = (0.0, 0usize);
        for s in summary.iter().filter(|s| keep(s)) {
            hits += s.accuracy * s.runs as f64;
            runs += s.runs;
        }
        (runs > 0).then(|| hits / runs as f64)
    };
    let full = mean(&|s: &Summary| s.budget.is_none());
    let budgets: Vec<usize> = {
        let mut b: Vec<usize> = summary.iter().filter_map(|s| s.budget).collect();
        b.sort_unstable();
        b.dedup();
        b
    };
    let (bmin, bmax) = (
        *budgets.first().unwrap_or(&1) as f64,
        *budgets.last().unwrap_or(&1) as f64,
    );
    let width = 500 * modes.len().max(1) as u32;
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let areas = root.split_evenly((1, modes.len().max(1)));
    for (area, mode) in areas.iter().zip(&modes) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("passkey accuracy, prompt {mode}"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(((bmin * 0.8)..(bmax * 1.25)).log_scale(), -0.02..1.05)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("budget (tokens per layer and head)")
            .draw()
            .map_err(|x| e(&x))?;
        if let Some(f) = full {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(bmin * 0.8, f), (bmax * 1.25, f)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(|x| e(&x))?
                .label("full")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
        }
        for (i, p) in policies.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let pts: Vec<(f64, f64)> = budgets
                .iter()
                .filter_map(|&b| {
                    mean(&|s: &Summary| {
                        s.policy == *p && s.prompt_mode == *mode && s.budget == Some(b)
                    })
                    .map(|acc| (b as f64, acc))
                })
                .collect();
            policy_line(&mut chart, p, color, pts)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// One policy's line with a dot at each point, labelled for the legend.
fn policy_line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    label: &str,
    color: RGBColor,
    pts: Vec<(f64, f64)>,
) -> Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let e = |e: &dyn std::fmt::Display| anyhow!("plot: {e}");
    chart
        .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
        .map_err(|x| e(&x))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    chart
        .draw_series(pts.into_iter().map(|pt| Circle::new(pt, 3, color.filled())))
        .map_err(|x| e(&x))?;
    Ok(())
}

/// The legend box of a chart's labelled series.
fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| anyhow!("plot: {x}"))
}
