//! Python float semantics the reference relies on: `float(str)` parsing (used by
//! `grader.py`'s `parse_digits`), `math.isclose` with `rel_tol=1e-4` (`numeric_equal`) and
//! `repr(float)` (what `word2number` results print as inside `parser.py`'s `strip_string`).

/// `float(s)` as Python parses it: surrounding whitespace, `_` between digits,
/// `inf`/`infinity`/`nan` in any case. `None` where Python raises `ValueError`.
pub fn parse_py_float(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    let cleaned: String = if t.contains('_') {
        let chars: Vec<char> = t.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            if *c == '_' {
                let before = i > 0 && chars[i - 1].is_ascii_digit();
                let after = chars.get(i + 1).is_some_and(|c| c.is_ascii_digit());
                if !(before && after) {
                    return None;
                }
            }
        }
        chars.into_iter().filter(|c| *c != '_').collect()
    } else {
        t.to_string()
    };
    if !cleaned.is_ascii() {
        return None;
    }
    let lower = cleaned.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if lower.len() - body.len() > 1 {
        return None;
    }
    let neg = lower.starts_with('-');
    let special = match body {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(v) = special {
        return Some(if neg { -v } else { v });
    }
    // Rust accepts the same decimal/exponent forms as Python for ASCII digits.
    if body.is_empty()
        || !body
            .chars()
            .all(|c| c.is_ascii_digit() || "eE.+-".contains(c))
    {
        return None;
    }
    lower.parse::<f64>().ok()
}

/// `math.isclose(reference, prediction, rel_tol=1e-4)` (grader.py `numeric_equal`).
pub fn numeric_equal(prediction: f64, reference: f64) -> bool {
    is_close(reference, prediction, 1e-4)
}

/// `math.isclose(a, b, rel_tol=rel, abs_tol=0)`.
pub fn is_close(a: f64, b: f64, rel: f64) -> bool {
    if a == b {
        return true;
    }
    if a.is_infinite() || b.is_infinite() || a.is_nan() || b.is_nan() {
        return false;
    }
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

/// `repr(x)` of a Python float.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Python: shortest digits, exponent with sign and at least two digits.
        let e = format!("{x:e}");
        let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        let digits = if digits.len() < 2 {
            format!("0{digits}")
        } else {
            digits.to_string()
        };
        return format!("{mant}e{sign}{digits}");
    }
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_python() {
        assert_eq!(parse_py_float(" 1_000 "), Some(1000.0));
        assert_eq!(parse_py_float("1.5e3"), Some(1500.0));
        assert_eq!(parse_py_float(".5"), Some(0.5));
        assert_eq!(parse_py_float("5."), Some(5.0));
        assert_eq!(parse_py_float("-Infinity"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_py_float("1__0"), None);
        assert_eq!(parse_py_float("--1"), None);
        assert_eq!(parse_py_float("\\frac{1}{2}"), None);
        assert_eq!(parse_py_float(""), None);
    }

    #[test]
    fn isclose_relative() {
        assert!(numeric_equal(4.2426, 3.0 * 2f64.sqrt()));
        assert!(!numeric_equal(1.73, 3f64.sqrt()));
        assert!(numeric_equal(f64::INFINITY, f64::INFINITY));
    }

    #[test]
    fn repr_like_python() {
        assert_eq!(py_float_repr(1.0), "1.0");
        assert_eq!(py_float_repr(2.5), "2.5");
        assert_eq!(py_float_repr(1e-5), "1e-05");
        assert_eq!(py_float_repr(1e16), "1e+16");
    }
}
