//! JSON Lines input shared by the readers of problem sets and of outputs to grade: the
//! line loop (blank lines skipped, the first bad line an error naming its number), the
//! object check, and text fields that may also be given as numbers.
//!
//! Must not know: what the records mean.

use std::io::BufRead;

use serde_json::{Map, Value};

use crate::error::EvalError;

/// Parses up to `limit` records (all with `None`) with `parse(text, index, line)`:
/// `index` counts the records kept so far (0-based), `line` is 1-based. Lines after the
/// limit are not read.
pub(crate) fn read_records<R: BufRead, T>(
    reader: R,
    limit: Option<usize>,
    mut parse: impl FnMut(&str, usize, usize) -> Result<T, EvalError>,
) -> Result<Vec<T>, EvalError> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        let line_no = i + 1;
        let text = line.map_err(|source| EvalError::Io {
            line: line_no,
            source,
        })?;
        if text.trim().is_empty() {
            continue;
        }
        out.push(parse(&text, out.len(), line_no)?);
    }
    Ok(out)
}

/// The JSON object on `line`.
pub(crate) fn json_object(record: &str, line: usize) -> Result<Map<String, Value>, EvalError> {
    let malformed = |message: String| EvalError::Malformed { line, message };
    match serde_json::from_str(record).map_err(|e| malformed(e.to_string()))? {
        Value::Object(obj) => Ok(obj),
        _ => Err(malformed("not a JSON object".into())),
    }
}

/// A string field (a number is taken as its text); `None` when absent or null.
pub(crate) fn text_field(
    obj: &Map<String, Value>,
    key: &str,
    line: usize,
) -> Result<Option<String>, EvalError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(EvalError::Malformed {
            line,
            message: format!("field `{key}` must be a string, got {other}"),
        }),
    }
}
