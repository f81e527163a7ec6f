//! `rkv eval grade`: grade a JSONL file of outputs without running a model.

use std::io::BufReader;
use std::path::PathBuf;

use crate::out::outln;
use anyhow::{Context, Result};
use clap::Args;
use rkv_eval::grade::grade_outputs;

#[derive(Args, Debug)]
pub struct GradeArgs {
    /// JSONL with `output` and `answer` (or `solution`) per line
    #[arg(long)]
    pub outputs: PathBuf,
    /// One JSON object per line, then `{"accuracy", "n"}`
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GradeArgs) -> Result<()> {
    let f = std::fs::File::open(&a.outputs)
        .with_context(|| format!("cannot open {}", a.outputs.display()))?;
    let report = grade_outputs(BufReader::new(f))
        .with_context(|| format!("cannot grade {}", a.outputs.display()))?;
    if a.json {
        for line in report.to_json_lines() {
            outln!("{line}")?;
        }
        return Ok(());
    }
    for v in &report.lines {
        outln!(
            "{:>5}  {}  extracted={:?}  gold={:?}",
            v.index,
            if v.correct { "correct" } else { "wrong  " },
            v.extracted.as_deref().unwrap_or(""),
            v.gold
        )?;
    }
    let s = report.summary();
    outln!(
        "accuracy {:.4} ({} of {})",
        s.accuracy,
        report.n_correct(),
        s.n
    )?;
    Ok(())
}
