//! Math problem sets in JSON Lines: MATH-500 (`problem`, `solution`, `answer`, ...) and
//! AIME-style files (`problem` or `question`, `answer`, optionally `solution`).
//!
//! Each record needs a problem text (`problem`, else `question`) and a gold answer:
//! `answer` (a string or a number), else the last `\boxed{}` of `solution`. The gold is
//! normalised with [`gold_from_record`], as `rkv eval grade` and the reference do.

use std::io::BufRead;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::EvalError;
use crate::grade::gold_from_record;
use crate::jsonl::{json_object, read_records, text_field};

/// The instruction appended to every problem (the R1 evaluation prompt).
pub const R1_SUFFIX: &str =
    "\nPlease reason step by step, and put your final answer within \\boxed{}.";

/// The user message for one problem (before the chat template): the problem, then the R1
/// evaluation prompt's instruction, as `rkv eval math` and the Python package ask it.
pub fn r1_prompt(problem: &str) -> String {
    format!("{problem}{R1_SUFFIX}")
}

/// One problem of a math dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MathProblem {
    /// 0-based index of the record (blank lines are skipped and not counted).
    pub index: usize,
    /// 1-based line number in the file.
    pub line: usize,
    /// The problem statement.
    pub problem: String,
    /// The raw `answer` field, if any.
    pub answer: Option<String>,
    /// The normalised gold answer.
    pub gold: String,
}

/// [`text_field`] with a blank string counted as absent.
fn nonblank_field(
    obj: &Map<String, Value>,
    key: &str,
    line: usize,
) -> Result<Option<String>, EvalError> {
    Ok(text_field(obj, key, line)?.filter(|s| !s.trim().is_empty()))
}

/// Parse one record (`index` 0-based, `line` 1-based for error messages).
pub fn parse_math_record(
    record: &str,
    index: usize,
    line: usize,
) -> Result<MathProblem, EvalError> {
    let malformed = |message: String| EvalError::Malformed { line, message };
    let obj = json_object(record, line)?;
    let problem = match nonblank_field(&obj, "problem", line)? {
        Some(p) => p,
        None => nonblank_field(&obj, "question", line)?
            .ok_or_else(|| malformed("needs a field `problem` or `question`".into()))?,
    };
    let answer = nonblank_field(&obj, "answer", line)?;
    let solution = nonblank_field(&obj, "solution", line)?;
    // A solution without a boxed answer has no gold: the extractor would fall back to
    // its last number, which is not an answer.
    let solution = solution.filter(|s| s.contains("boxed"));
    let gold = gold_from_record(answer.as_deref(), solution.as_deref())
        .filter(|g| !g.is_empty())
        .ok_or_else(|| {
            malformed("needs a gold answer: a field `answer` or a `solution` with \\boxed{}".into())
        })?;
    Ok(MathProblem {
        index,
        line,
        problem,
        answer,
        gold,
    })
}

/// Read up to `limit` problems (all with `None`) from JSON Lines. Blank lines are
/// skipped; the first malformed line is an error naming its line number. Lines after the
/// limit are not read.
pub fn read_math_problems<R: BufRead>(
    reader: R,
    limit: Option<usize>,
) -> Result<Vec<MathProblem>, EvalError> {
    read_records(reader, limit, parse_math_record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &str, limit: Option<usize>) -> Result<Vec<MathProblem>, EvalError> {
        read_math_problems(s.as_bytes(), limit)
    }

    #[test]
    fn math500_and_aime_shapes() {
        let data = concat!(
            r#"{"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "answer": "2"}"#,
            "\n\n",
            r#"{"id": 60, "question": "Q?", "answer": 204}"#,
            "\n",
            r#"{"question": "Q2?", "solution": "So $x = \\boxed{\\dfrac{1}{2}}$."}"#,
            "\n",
        );
        let ps = read(data, None).unwrap();
        assert_eq!(ps.len(), 3);
        assert_eq!(ps[0].problem, "What is $1+1$?");
        assert_eq!(ps[0].gold, "2");
        assert_eq!((ps[1].index, ps[1].line), (1, 3));
        assert_eq!(ps[1].gold, "204");
        assert_eq!(ps[1].answer.as_deref(), Some("204"));
        assert_eq!(ps[2].gold, "\\frac{1}{2}");
        assert_eq!(read(data, Some(1)).unwrap().len(), 1);
    }

    #[test]
    fn problem_wins_over_question() {
        let ps = read(r#"{"problem": "P", "question": "Q", "answer": "1"}"#, None).unwrap();
        assert_eq!(ps[0].problem, "P");
    }

    #[test]
    fn bad_lines_name_their_number() {
        let ok = r#"{"problem": "P", "answer": "1"}"#;
        let cases = [
            ("{not json", "line 2"),
            (r#"[1, 2]"#, "not a JSON object"),
            (r#"{"answer": "1"}"#, "`problem` or `question`"),
            (r#"{"problem": "P"}"#, "gold answer"),
            (
                r#"{"problem": "P", "solution": "no box, 42"}"#,
                "gold answer",
            ),
            (r#"{"problem": "P", "answer": ""}"#, "gold answer"),
            (r#"{"problem": ["P"], "answer": "1"}"#, "must be a string"),
        ];
        for (bad, needle) in cases {
            let e = read(&format!("{ok}\n{bad}\n{ok}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("line 2"), "{bad}: {e}");
            assert!(e.contains(needle), "{bad}: {e}");
        }
        // A bad line past the limit is never read.
        assert_eq!(read(&format!("{ok}\n{{bad\n"), Some(1)).unwrap().len(), 1);
    }
}
