//! `strip_string` of `parser.py` (Qwen2.5-Math evaluation toolkit, as shipped in R-KV's
//! `evaluation/`), rule for rule and in the same order, quirks included: `\text{..}` at the
//! end is dropped as a unit, unit words are deleted anywhere (see [`super::units`]), number
//! words become digits, `x=`/`y=`/`z=` are removed anywhere, `and` is deleted inside words,
//! `inf` becomes `\infty`, `a.000` loses its zeros, a short `k=` prefix is dropped, spaces
//! are removed and `\frac12`, `\sqrt2`, `a/b` are braced.

use super::units::remove_units;
use super::word_number::convert_word_number;
use regex::Regex;
use std::sync::OnceLock;

struct Patterns {
    begin_array: Regex,
    end_array: Regex,
    text_at_end: Regex,
    text: Regex,
    mbox: Regex,
    zeros_mid: Regex,
    zeros_end: Regex,
    sqrt: Regex,
}

fn pats() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |p: &str| Regex::new(p).unwrap_or_else(|e| unreachable!("bad pattern {p}: {e}"));
        Patterns {
            begin_array: re(r"\\begin\{array\}\{.*?\}"),
            end_array: re(r"\\end\{array\}"),
            text_at_end: re(r"\\text\{.*?\}$"),
            text: re(r"\\text\{(.*?)\}"),
            mbox: re(r"\\mbox\{.*?\}"),
            zeros_mid: re(r"(\d+)\.0*([^\d])"),
            zeros_end: re(r"(\d+)\.0*$"),
            sqrt: re(r"\\sqrt(\w+)"),
        }
    })
}

/// `_fix_fracs`: `\frac12` -> `\frac{1}{2}`, `\frac1{72}` -> `\frac{1}{72}`; gives the input
/// back when a `\frac` is followed by fewer than two characters.
pub fn fix_fracs(string: &str) -> String {
    let mut parts = string.split("\\frac");
    let mut out = parts.next().unwrap_or_default().to_string();
    for sub in parts {
        out.push_str("\\frac");
        let chars: Vec<char> = sub.chars().collect();
        if chars.first() == Some(&'{') {
            out.push_str(sub);
            continue;
        }
        if chars.len() < 2 {
            return string.to_string();
        }
        let (a, b) = (chars[0], chars[1]);
        let rest: String = chars[2..].iter().collect();
        if b != '{' {
            out.push_str(&format!("{{{a}}}{{{b}}}{rest}"));
        } else {
            out.push_str(&format!("{{{a}}}{b}{rest}"));
        }
    }
    out
}

/// Python `str(int(s))` for the strings `int()` accepts after spaces were removed.
fn py_int_canonical(s: &str) -> Option<String> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return None;
    }
    let d: String = digits.chars().filter(|c| *c != '_').collect();
    let t = d.trim_start_matches('0');
    let t = if t.is_empty() { "0" } else { t };
    Some(if neg && t != "0" {
        format!("-{t}")
    } else {
        t.to_string()
    })
}

/// `_fix_a_slash_b`: `3/4` -> `\frac{3}{4}` when both sides are integers (or contain `sqrt`)
/// and the string is exactly `"{a}/{b}"`.
pub fn fix_a_slash_b(string: &str) -> String {
    let parts: Vec<&str> = string.split('/').collect();
    if parts.len() != 2 {
        return string.to_string();
    }
    let side = |s: &str| {
        if s.contains("sqrt") {
            Some(s.to_string())
        } else {
            py_int_canonical(s)
        }
    };
    match (side(parts[0]), side(parts[1])) {
        (Some(a), Some(b)) if format!("{a}/{b}") == string => format!("\\frac{{{a}}}{{{b}}}"),
        _ => string.to_string(),
    }
}

/// `strip_string(string, skip_unit)` of `parser.py`.
pub fn strip_string_opts(input: &str, skip_unit: bool) -> String {
    let p = pats();
    let mut s = input.trim().replace('\n', "");
    s = s.trim_end_matches('.').to_string();
    s = s.replace("\\!", "");
    s = p
        .begin_array
        .replace_all(&s, r"\begin{pmatrix}")
        .into_owned();
    s = p.end_array.replace_all(&s, r"\end{pmatrix}").into_owned();
    s = s.replace("bmatrix", "pmatrix");
    s = s.replace("tfrac", "frac").replace("dfrac", "frac");
    s = s
        .replace("\\neq", "\\ne")
        .replace("\\leq", "\\le")
        .replace("\\geq", "\\ge");
    s = s.replace("\\left", "").replace("\\right", "");
    s = s.replace("\\{", "{").replace("\\}", "}");

    // Remove a trailing "\text{..}" as a unit unless that leaves nothing.
    let without = p.text_at_end.replace_all(&s, "").trim().to_string();
    if !without.is_empty() && without != s {
        s = without;
    }
    if !skip_unit {
        s = remove_units(&s);
    }
    s = s.replace("^{\\circ}", "").replace("^\\circ", "");
    s = s.replace("\\$", "").replace('$', "");
    s = s.replace("\\(", "").replace("\\)", "");
    s = convert_word_number(&s);
    s = p.text.replace_all(&s, "${1}").into_owned();
    for key in [
        "x=", "y=", "z=", "x\\in", "y\\in", "z\\in", "x\\to", "y\\to", "z\\to",
    ] {
        s = s.replace(key, "");
    }
    s = s.replace("\\emptyset", "{}");
    s = s.replace("(-\\infty,\\infty)", "\\mathbb{R}");
    s = s.replace("\\%", "").replace('%', "");
    s = s.replace(" .", " 0.").replace("{.", "{0.");
    // (The reference's bracket unwrapping needs `isalnum()` of a string starting with a
    // bracket, which never holds: it is dead code there and omitted here.)
    s = s.replace("infinity", "\\infty");
    if !s.contains("\\infty") {
        s = s.replace("inf", "\\infty");
    }
    s = s.replace("+\\inity", "\\infty");
    s = s.replace("and", "").replace("\\mathbf", "");
    s = p.mbox.replace_all(&s, "").into_owned();
    if s.contains('j') && !s.contains('i') {
        s = s.replace('j', "i");
    }
    s = p.zeros_mid.replace_all(&s, "${1}${2}").into_owned();
    s = p.zeros_end.replace_all(&s, "${1}").into_owned();
    if s.is_empty() {
        return s;
    }
    if s.starts_with('.') {
        s = format!("0{s}");
    }
    let eq: Vec<&str> = s.split('=').collect();
    if eq.len() == 2 && eq[0].chars().count() <= 2 {
        s = eq[1].to_string();
    }
    s = p.sqrt.replace_all(&s, r"\sqrt{${1}}").into_owned();
    s = s.replace(' ', "");
    s = fix_fracs(&s);
    fix_a_slash_b(&s)
}

/// `strip_string(string)` with unit removal (every dataset graded here).
pub fn strip_string(s: &str) -> String {
    strip_string_opts(s, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fracs() {
        assert_eq!(fix_fracs("\\frac12"), "\\frac{1}{2}");
        assert_eq!(fix_fracs("\\frac1{72}"), "\\frac{1}{72}");
        assert_eq!(fix_fracs("\\frac{3}{4}"), "\\frac{3}{4}");
        assert_eq!(fix_fracs("2\\frac1"), "2\\frac1");
        assert_eq!(fix_a_slash_b("3/4"), "\\frac{3}{4}");
        assert_eq!(fix_a_slash_b("-1/3"), "\\frac{-1}{3}");
        assert_eq!(fix_a_slash_b("03/4"), "03/4");
        assert_eq!(fix_a_slash_b("\\sqrt{2}/2"), "\\frac{\\sqrt{2}}{2}");
        assert_eq!(fix_a_slash_b("\\pi/2"), "\\pi/2");
    }

    #[test]
    fn rules() {
        let cases = [
            ("\\dfrac{14}{3}", "\\frac{14}{3}"),
            ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
            ("45 degrees", "45"),
            ("\\$18.90", "18.90"),
            ("18.9 dollars", "18.9dollars"),
            ("2 \\text{m}", "2"),
            ("\\dfrac{1}{2}\\text{ meters}", "\\frac{1}{2}"),
            ("25\\%", "25"),
            ("50 percent", "50"),
            ("5.00", "5"),
            ("5.", "5"),
            (".75", "0.75"),
            ("x = 5", "5"),
            ("k=5", "5"),
            ("abc=5", "abc=5"),
            ("y=2x+3", "2x+3"),
            ("2x+3y=6", "2x+36"),
            ("a = 2, b = 3", "2,3"),
            ("\\pm 2", "\\2"),
            ("\\sqrt3", "\\sqrt{3}"),
            ("30^\\circ", "30"),
            ("\\{1, 2, 3\\}", "{1,2,3}"),
            ("\\emptyset", "{}"),
            ("(-\\infty,\\infty)", "\\mathbb{R}"),
            ("(-\\infty, \\infty)", "(-\\infty,\\infty)"),
            ("twenty-one", "21"),
            ("\\text{no solution}", "nosolution"),
            ("\\text{east}", ""),
            ("\\mathbf{7}", "{7}"),
            (
                "\\begin{array}{cc} 1 & 2 \\end{array}",
                "\\begin{pmatrix}1&2\\end{pmatrix}",
            ),
            ("x \\geq 3", "x\\ge3"),
            ("3j", "3i"),
            ("Grand", "Gr"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_string(input), want, "input {input:?}");
        }
    }
}
