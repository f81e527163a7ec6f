//! `symbolic_equal` of `grader.py`: parse both sides as sympy would (`parse_latex`, after
//! turning `\\` into `\`, then as written) and accept when they are the same expression
//! (`simplify(a - b) == 0`: equal at every sample point), when both are relations with
//! `|lhs - rhs|` equal (any relation type: `x<3` matches `3>x` and even `x>3`), or when
//! both are numbers within 1e-4 relative (`N()`). Free symbols block the numeric check, so
//! `6.283` is not `2\pi`. Unparsable text equals only identical text.

mod eval;
mod lexer;
mod parser;

pub use parser::{parse_latex, Expr, Parsed};

use super::pyfloat::numeric_equal;
use eval::eval;

const TRIALS: u64 = 4;

/// `_parse`: `parse_latex` of the text with `\\` turned into `\`, else of the text itself.
/// (sympy's `parse_expr` and `latex2sympy` fallbacks are not modelled.)
fn parse_any(s: &str) -> Option<Parsed> {
    parse_latex(&s.replace("\\\\", "\\")).or_else(|| parse_latex(s))
}

/// Two values the same up to float noise (a stand-in for exact symbolic zero).
fn same_value(a: f64, b: f64) -> Option<bool> {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            None
        } else {
            Some(false)
        };
    }
    if a == b {
        return Some(true);
    }
    if a.is_infinite() || b.is_infinite() {
        return Some(false);
    }
    Some((a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-3))
}

/// Whether `f` and `g` agree at every (conclusive) sample point.
fn same_function(f: impl Fn(u64) -> f64, g: impl Fn(u64) -> f64) -> bool {
    let mut conclusive = 0;
    for t in 0..TRIALS {
        match same_value(f(t), g(t)) {
            Some(false) => return false,
            Some(true) => conclusive += 1,
            None => {}
        }
    }
    conclusive > 0
}

fn exprs_equal(a: &Expr, b: &Expr) -> bool {
    if a == b || same_function(|t| eval(a, t), |t| eval(b, t)) {
        return true;
    }
    if a.has_symbols() || b.has_symbols() {
        return false;
    }
    let (va, vb) = (eval(a, 0), eval(b, 0));
    va.is_finite() && vb.is_finite() && numeric_equal(va, vb)
}

/// `symbolic_equal(a, b)` of `grader.py`.
pub fn symbolic_equal(a: &str, b: &str) -> bool {
    match (parse_any(a), parse_any(b)) {
        (None, None) => a == b,
        (Some(Parsed::Expr(x)), Some(Parsed::Expr(y))) => exprs_equal(&x, &y),
        (Some(Parsed::Rel(op1, l1, r1)), Some(Parsed::Rel(op2, l2, r2))) => {
            if op1 == op2 && l1 == l2 && r1 == r2 {
                return true;
            }
            same_function(
                |t| (eval(&l1, t) - eval(&r1, t)).abs(),
                |t| (eval(&l2, t) - eval(&r2, t)).abs(),
            )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::symbolic_equal as se;

    #[test]
    fn equivalences() {
        assert!(se("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}"));
        assert!(se("\\sqrt{12}", "2\\sqrt{3}"));
        assert!(se("3\\sqrt{2}", "4.2426"));
        assert!(!se("\\sqrt{3}", "1.73"));
        assert!(se("\\frac{4\\pi}{3}", "\\frac{4}{3}\\pi"));
        assert!(!se("6.283", "2\\pi"));
        assert!(!se("3.14", "\\pi"));
        assert!(se("2i+3", "3+2i"));
        assert!(se("1.5\\times10^{3}", "1500"));
        assert!(se("\\sqrt[3]{2}", "2^{1/3}"));
        assert!(!se("\\sin30", "\\frac{1}{2}"));
        assert!(se("\\ln2", "0.6931"));
        assert!(se("12\\,", "12"));
        assert!(!se("\\frac{14}{3}", "4\\frac{2}{3}"));
        assert!(!se("-1.1213", "6-5i"));
        assert!(se("x<3", "3>x"));
        assert!(!se("2x+36", "3y+26"));
        assert!(!se("1{,}000", "1000"));
        assert!(se("\\infty", "\\infty"));
    }
}
