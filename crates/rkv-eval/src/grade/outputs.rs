//! `rkv eval grade --outputs FILE.jsonl`: grade existing outputs, one JSON object a line
//! with `output` and `answer` (or, without `answer`, `solution`), into per-line verdicts
//! and an accuracy. The JSON shapes are those the CLI prints with `--json`: one
//! [`LineVerdict`] per input line, then one [`Summary`].

use super::verdict::{gold_from_record, grade};
use crate::error::EvalError;
use crate::jsonl::{json_object, read_records, text_field};
use serde::{Deserialize, Serialize};
use std::io::BufRead;

/// The verdict on one input line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineVerdict {
    /// 0-based index of the record (blank lines are skipped and not counted).
    pub index: usize,
    /// The graded prediction (`null` for an empty output).
    pub extracted: Option<String>,
    /// The normalised gold answer.
    pub gold: String,
    /// Whether the prediction matches the gold answer.
    pub correct: bool,
}

/// The closing summary line.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Fraction of records graded correct, in `[0, 1]` (0 when there are none).
    pub accuracy: f64,
    /// Number of records graded.
    pub n: usize,
}

/// All verdicts of one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GradeReport {
    /// One verdict per record, in input order.
    pub lines: Vec<LineVerdict>,
}

impl GradeReport {
    /// Number of correct records.
    pub fn n_correct(&self) -> usize {
        self.lines.iter().filter(|l| l.correct).count()
    }

    /// Accuracy and count.
    pub fn summary(&self) -> Summary {
        let n = self.lines.len();
        let accuracy = if n == 0 {
            0.0
        } else {
            self.n_correct() as f64 / n as f64
        };
        Summary { accuracy, n }
    }

    /// The `--json` output: one line per record, then the summary line.
    pub fn to_json_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .lines
            .iter()
            .map(|l| serde_json::to_string(l).unwrap_or_default())
            .collect();
        out.push(serde_json::to_string(&self.summary()).unwrap_or_default());
        out
    }
}

/// Grade one JSON record (1-based `line` for error messages).
pub fn grade_record(record: &str, index: usize, line: usize) -> Result<LineVerdict, EvalError> {
    let obj = json_object(record, line)?;
    let output = text_field(&obj, "output", line)?.ok_or_else(|| EvalError::Malformed {
        line,
        message: "missing field `output`".into(),
    })?;
    let answer = text_field(&obj, "answer", line)?;
    let solution = text_field(&obj, "solution", line)?;
    let gold = gold_from_record(answer.as_deref(), solution.as_deref()).ok_or_else(|| {
        EvalError::Malformed {
            line,
            message: "needs a field `answer` or `solution`".into(),
        }
    })?;
    let v = grade(&output, &gold);
    Ok(LineVerdict {
        index,
        extracted: v.extracted,
        gold: v.gold,
        correct: v.correct,
    })
}

/// Read JSONL records and grade each; the first malformed line is an error naming it.
pub fn grade_outputs<R: BufRead>(reader: R) -> Result<GradeReport, EvalError> {
    let lines = read_records(reader, None, grade_record)?;
    Ok(GradeReport { lines })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grades_a_file() {
        let input = concat!(
            r#"{"output": "so \\boxed{5}", "answer": "5"}"#,
            "\n",
            "\n",
            r#"{"output": "it is 7", "solution": "We get $\\boxed{8}$."}"#,
            "\n",
            r#"{"output": "", "answer": 3}"#,
            "\n",
        );
        let report = grade_outputs(input.as_bytes()).expect("valid input");
        assert_eq!(report.lines.len(), 3);
        assert!(report.lines[0].correct);
        assert_eq!(report.lines[1].gold, "8");
        assert_eq!(report.lines[2].extracted, None);
        let s = report.summary();
        assert_eq!(s.n, 3);
        assert!((s.accuracy - 1.0 / 3.0).abs() < 1e-12);
        let json = report.to_json_lines();
        assert_eq!(
            json[0],
            r#"{"index":0,"extracted":"5","gold":"5","correct":true}"#
        );
        assert!(json[3].starts_with(r#"{"accuracy":0.333"#));
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let input = "{\"output\": \"1\", \"answer\": \"1\"}\nnot json\n";
        let err = grade_outputs(input.as_bytes()).expect_err("line 2 is bad");
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = grade_outputs("{\"output\": \"1\"}".as_bytes()).expect_err("no gold");
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = grade_outputs("[1]".as_bytes()).expect_err("not object");
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
