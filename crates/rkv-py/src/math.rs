//! rkv's math evaluation from Python: the problems of a MATH-500 or AIME-style JSONL
//! file, the R1 evaluation prompt and the grader, as `rkv eval math` uses them, so a
//! Python pass@k script grades exactly as the CLI does.
//!
//! Must not know: the engine.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The problems of `path` (at most `limit`), each a dict with `index`, `problem` and
/// `gold` (the normalised gold answer).
#[pyfunction]
#[pyo3(signature = (path, limit=None))]
pub fn read_math_problems(
    py: Python<'_>,
    path: PathBuf,
    limit: Option<usize>,
) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let f = File::open(&path)
        .map_err(|e| PyValueError::new_err(format!("cannot open {}: {e}", path.display())))?;
    let problems = rkv_eval::read_math_problems(BufReader::new(f), limit)
        .map_err(|e| PyValueError::new_err(format!("cannot read {}: {e}", path.display())))?;
    problems
        .into_iter()
        .map(|p| {
            let d = PyDict::new(py);
            d.set_item("index", p.index)?;
            d.set_item("problem", p.problem)?;
            d.set_item("gold", p.gold)?;
            Ok(d)
        })
        .collect()
}

/// The user message for one problem: the problem, then "Please reason step by step, and
/// put your final answer within \boxed{}." (the R1 evaluation prompt).
#[pyfunction]
pub fn r1_prompt(problem: &str) -> String {
    rkv_eval::r1_prompt(problem)
}

/// Grades `output` against `gold`: `(correct, extracted)`, the answer taken from the
/// output's last `\boxed{}` (or its last number) compared as the Qwen2.5-Math toolkit
/// does.
#[pyfunction]
pub fn grade(output: &str, gold: &str) -> (bool, Option<String>) {
    let v = rkv_eval::grade::grade(output, gold);
    (v.correct, v.extracted)
}
