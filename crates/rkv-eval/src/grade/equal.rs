//! `math_equal(prediction, reference)` of `grader.py` (include_percentage and is_close on,
//! no timeout), in the reference order: case-insensitive string match, choice letter,
//! numbers (commas dropped; `gold/100`, `gold`, `gold*100` all accepted within 1e-4
//! relative; two numbers that differ are final), bracket-insensitive match (`(2,5]` equals
//! `[2,5)`), element-wise tuples/intervals, element-wise matrices, equations, then
//! [`super::latex::symbolic_equal`].

use super::choice::choice_answer_clean_grader;
use super::latex::symbolic_equal;
use super::pyfloat::{numeric_equal, parse_py_float};
use regex::Regex;
use std::sync::OnceLock;

/// `parse_digits`: a float after removing commas, or a `%`/`\%` percentage over 100.
pub fn parse_digits(num: &str) -> Option<f64> {
    let n = num.replace(',', "");
    if let Some(v) = parse_py_float(&n) {
        return Some(v);
    }
    let stripped = n.strip_suffix('%')?;
    let stripped = stripped.strip_suffix('\\').unwrap_or(stripped);
    parse_py_float(stripped).map(|v| v / 100.0)
}

fn list_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^(\(|\[).+(\)|\])").ok())
        .as_ref()
}

fn is_list_format(s: &str) -> bool {
    list_re().is_some_and(|re| re.is_match(s))
}

/// Python `s[1:-1]` on characters.
fn inner(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 2 {
        return String::new();
    }
    chars[1..chars.len() - 1].iter().collect()
}

/// `str_to_pmatrix`: `{a,b}` groups become column matrices.
fn str_to_pmatrix(s: &str) -> String {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let Some(re) = RE.get_or_init(|| Regex::new(r"\{.*,.*\}").ok()).as_ref() else {
        return String::new();
    };
    re.find_iter(s.trim())
        .map(|m| {
            let body = m.as_str().trim_matches(['{', '}']);
            format!(
                "\\begin{{pmatrix}}{}\\end{{pmatrix}}",
                body.replace(',', "\\")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn is_matrix(s: &str) -> bool {
    (s.starts_with("\\begin{pmatrix}") || s.starts_with("\\begin{bmatrix}"))
        && (s.ends_with("\\end{pmatrix}") || s.ends_with("\\end{bmatrix}"))
}

fn matrix_rows(s: &str) -> Vec<String> {
    let body = s
        .get("\\begin{pmatrix}".len()..s.len().saturating_sub("\\end{pmatrix}".len()))
        .unwrap_or_default();
    body.split("\\\\")
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn matrices_equal(pred: &str, reference: &str, depth: usize) -> bool {
    let (p, r) = (matrix_rows(pred), matrix_rows(reference));
    if p.len() != r.len() {
        return false;
    }
    p.iter().zip(&r).all(|(pl, rl)| {
        let (pp, rp): (Vec<&str>, Vec<&str>) = (pl.split('&').collect(), rl.split('&').collect());
        pp.len() == rp.len()
            && pp
                .iter()
                .zip(&rp)
                .all(|(a, b)| depth < MAX_NESTING && math_equal_at(a, b, depth + 1))
    })
}

fn equation_side(s: &str) -> String {
    let (l, r) = s.split_once('=').unwrap_or((s, ""));
    format!("{} - ({})", l.trim(), r.trim())
}

fn short_lhs(s: &str) -> bool {
    s.split('=')
        .next()
        .unwrap_or_default()
        .trim()
        .chars()
        .count()
        <= 2
}

/// Nesting beyond which element-wise comparison gives up (the reference recurses freely;
/// this keeps adversarial input from exhausting the stack).
const MAX_NESTING: usize = 32;

/// `math_equal(prediction, reference)`.
pub fn math_equal(prediction: &str, reference: &str) -> bool {
    math_equal_at(prediction, reference, 0)
}

fn math_equal_at(prediction: &str, reference: &str, depth: usize) -> bool {
    let math_equal = |a: &str, b: &str| depth < MAX_NESTING && math_equal_at(a, b, depth + 1);
    if prediction.trim().to_lowercase() == reference.trim().to_lowercase() {
        return true;
    }
    if ["A", "B", "C", "D", "E"].contains(&reference)
        && choice_answer_clean_grader(prediction) == reference
    {
        return true;
    }
    if let (Some(p), Some(r)) = (parse_digits(prediction), parse_digits(reference)) {
        return [r / 100.0, r, r * 100.0]
            .iter()
            .any(|g| numeric_equal(p, *g));
    }
    if prediction.is_empty() {
        return false;
    }
    let prediction = prediction.trim();
    let mut reference = reference.trim().to_string();
    if prediction.contains("pmatrix") && !reference.contains("pmatrix") {
        reference = str_to_pmatrix(&reference);
    }
    let reference = reference.as_str();

    let (mut pred_str, mut ref_str) = (prediction.to_string(), reference.to_string());
    let brackets = ['[', ']', '(', ')'];
    if (prediction.starts_with('[') && prediction.ends_with(']') && !reference.starts_with('('))
        || (prediction.starts_with('(') && prediction.ends_with(')') && !reference.starts_with('['))
    {
        pred_str = pred_str.trim_matches(brackets).to_string();
        ref_str = ref_str.trim_matches(brackets).to_string();
    }
    let unbracket = |s: &str| s.replace(['{', '}', '(', ')'], "").to_lowercase();
    if unbracket(&pred_str) == unbracket(&ref_str) {
        return true;
    }

    if is_list_format(prediction) && is_list_format(reference) {
        let inner_p = inner(prediction);
        let inner_r = inner(reference);
        let pp: Vec<&str> = inner_p.split(',').collect();
        let rp: Vec<&str> = inner_r.split(',').collect();
        if pp.len() == rp.len() && pp.iter().zip(&rp).all(|(a, b)| math_equal(a, b)) {
            return true;
        }
    }
    if is_matrix(prediction) && is_matrix(reference) && matrices_equal(prediction, reference, depth)
    {
        return true;
    }

    let (pc, rc) = (
        prediction.matches('=').count(),
        reference.matches('=').count(),
    );
    if pc == 1 && rc == 1 {
        let (p, r) = (equation_side(prediction), equation_side(reference));
        if symbolic_equal(&p, &r) || symbolic_equal(&format!("-({p})"), &r) {
            return true;
        }
    } else if pc == 1 && short_lhs(prediction) && rc == 0 {
        let rhs = prediction.split_once('=').map_or("", |(_, r)| r);
        if math_equal(rhs, reference) {
            return true;
        }
    } else if rc == 1 && short_lhs(reference) && pc == 0 {
        let rhs = reference.split_once('=').map_or("", |(_, r)| r);
        if math_equal(prediction, rhs) {
            return true;
        }
    }
    symbolic_equal(prediction, reference)
}

#[cfg(test)]
mod tests {
    use super::math_equal as eq;

    #[test]
    fn strings_and_numbers() {
        assert!(eq("Yes", "yes"));
        assert!(eq("100", "1"));
        assert!(eq("0.01", "1"));
        assert!(!eq("5.001", "5"));
        assert!(eq("1.5e3", "1500"));
        assert!(eq("1,000", "1000"));
        assert!(!eq("50", "\\frac{1}{2}"));
        assert!(eq("\\frac{1}{3}", "0.33333"));
        assert!(!eq("", "0"));
        assert!(eq("", ""));
        assert!(eq("(C)", "C"));
    }

    #[test]
    fn structures() {
        assert!(eq("(2,5]", "[2,5)"));
        assert!(!eq("(2,1)", "(1,2)"));
        assert!(eq("{1,2,3}", "{1,2,3}"));
        assert!(!eq("-2,3", "3,-2"));
        assert!(eq("(\\frac{1}{2},-\\frac{3}{4})", "(0.5,-0.75)"));
        assert!(eq("(3,\\pi/2)", "(3,\\frac{\\pi}{2})"));
        assert!(!eq("(2,3)\\cup(0,1)", "(0,1)\\cup(2,3)"));
        assert!(eq(
            "\\begin{pmatrix}-\\frac{1}{3}\\\\\\frac{2}{3}\\end{pmatrix}",
            "\\begin{pmatrix}-1/3\\\\2/3\\end{pmatrix}"
        ));
        assert!(!eq(
            "\\begin{pmatrix}1\\\\2\\end{pmatrix}",
            "\\begin{pmatrix}2\\\\1\\end{pmatrix}"
        ));
    }

    #[test]
    fn equations() {
        assert!(eq("x^2+y^2=25", "x^2+y^2=25"));
        assert!(eq("y=2x+3", "2x+3"));
        assert!(eq("25=x^2+y^2", "x^2+y^2=25"));
        assert!(!eq("x>3", "(3,\\infty)"));
    }
}
