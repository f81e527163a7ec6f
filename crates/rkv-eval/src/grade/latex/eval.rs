//! Numeric evaluation of a parsed expression, standing in for sympy's `simplify(a - b) == 0`
//! and `N()`: free symbols (including `\pi`, `e`, `i`, which `parse_latex` reads as plain
//! symbols) get pseudo-random values, undefined functions a pseudo-random value per
//! argument, so two expressions agree at every sample point iff they are (almost surely)
//! the same function.

use super::parser::Expr;

fn fnv(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for byte in bytes {
        h ^= u64::from(*byte);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 29)
}

fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The value of a free symbol at sample point `trial`, in `[1.1, 2.9)`.
pub fn symbol_value(name: &str, trial: u64) -> f64 {
    1.1 + 1.8 * unit(fnv(name.as_bytes(), trial + 1))
}

fn undefined_function(name: &str, args: &[f64], trial: u64) -> f64 {
    let mut key = name.as_bytes().to_vec();
    for a in args {
        // Round so that the same argument reached by another route hashes alike.
        key.extend_from_slice(format!("{a:.9e}").as_bytes());
    }
    0.5 + unit(fnv(&key, trial + 7))
}

fn factorial(n: f64) -> f64 {
    if n < 0.0 || n.fract() != 0.0 || n > 170.0 {
        return f64::NAN;
    }
    (1..=n as u64).fold(1.0, |acc, k| acc * k as f64)
}

fn binomial(n: f64, k: f64) -> f64 {
    if k.fract() != 0.0 || n.fract() != 0.0 || k > 1000.0 {
        return f64::NAN;
    }
    if k < 0.0 {
        return 0.0;
    }
    (0..k as u64).fold(1.0, |acc, j| acc * (n - j as f64) / (j as f64 + 1.0))
}

fn apply(name: &str, args: &[f64], trial: u64) -> f64 {
    let x = args.first().copied().unwrap_or(f64::NAN);
    match name {
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tan" => x.tan(),
        "csc" => 1.0 / x.sin(),
        "sec" => 1.0 / x.cos(),
        "cot" => 1.0 / x.tan(),
        "asin" => x.asin(),
        "acos" => x.acos(),
        "atan" => x.atan(),
        "acsc" => (1.0 / x).asin(),
        "asec" => (1.0 / x).acos(),
        "acot" => (1.0 / x).atan(),
        "sinh" => x.sinh(),
        "cosh" => x.cosh(),
        "tanh" => x.tanh(),
        "asinh" => x.asinh(),
        "acosh" => x.acosh(),
        "atanh" => x.atanh(),
        "exp" => x.exp(),
        "abs" => x.abs(),
        "fact" => factorial(x),
        "binom" => binomial(x, args.get(1).copied().unwrap_or(f64::NAN)),
        other => undefined_function(other, args, trial),
    }
}

/// Evaluate at sample point `trial` (NaN where sympy would leave the reals).
pub fn eval(e: &Expr, trial: u64) -> f64 {
    match e {
        Expr::Num(v) => *v,
        Expr::Inf => f64::INFINITY,
        Expr::Sym(name) => symbol_value(name, trial),
        Expr::Neg(a) => -eval(a, trial),
        Expr::Add(a, c) => eval(a, trial) + eval(c, trial),
        Expr::Mul(a, c) => eval(a, trial) * eval(c, trial),
        Expr::Div(a, c) => eval(a, trial) / eval(c, trial),
        Expr::Pow(a, c) => pow(eval(a, trial), eval(c, trial)),
        Expr::Log(a, base) => eval(a, trial).ln() / eval(base, trial).ln(),
        Expr::Func(name, args) => {
            let vals: Vec<f64> = args.iter().map(|a| eval(a, trial)).collect();
            apply(name, &vals, trial)
        }
    }
}

/// Real powers; a negative base with an odd-denominator rational exponent stays real only
/// for integer exponents (sympy takes the principal complex root otherwise).
fn pow(base: f64, exp: f64) -> f64 {
    if base < 0.0 && exp.fract() != 0.0 {
        return f64::NAN;
    }
    base.powf(exp)
}

#[cfg(test)]
mod tests {
    use super::super::parser::{parse_latex, Parsed};
    use super::*;

    fn val(s: &str) -> f64 {
        match parse_latex(s) {
            Some(Parsed::Expr(e)) => eval(&e, 0),
            other => panic!("no expression for {s}: {other:?}"),
        }
    }

    #[test]
    fn arithmetic() {
        assert_eq!(val("\\frac{14}{3}"), 14.0 / 3.0);
        assert_eq!(val("4\\frac{2}{3}"), 8.0 / 3.0);
        assert_eq!(val("2^{10}"), 1024.0);
        assert_eq!(val("2^10"), 1024.0);
        assert_eq!(val("3\\times10^8"), 3e8);
        assert!((val("\\sqrt[3]{8}") - 2.0).abs() < 1e-12);
        assert_eq!(val("3x4"), 12.0);
        assert_eq!(val("5!"), 120.0);
        assert_eq!(val("\\binom{5}{2}"), 10.0);
        assert!((val("\\log100") - 2.0).abs() < 1e-12);
        assert!((val("\\ln2") - 2f64.ln()).abs() < 1e-12);
        assert_eq!(val("|-3|"), 3.0);
        assert_eq!(val("1,2"), 1.0);
        assert_eq!(val("12\\,"), 12.0);
    }
}
