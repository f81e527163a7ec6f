//! Tokens of sympy's LaTeX grammar (`sympy/parsing/latex/LaTeX.g4`, sympy 1.12, the
//! `parse_latex` that `grader.py`'s `symbolic_equal` tries first). Spacing commands,
//! `\left` and `\right` are skipped; `\name` is a keyword when the whole letter run is one,
//! otherwise a SYMBOL (so `\pir` is one symbol); numbers take `,ddd` groups (`1,000`).
//! Characters with no token (`$`, `%`, `&`, `\\`, `'`, non-ASCII) lex as [`Tok::Error`]:
//! the ANTLR lexer is pulled lazily, so it raises (and the whole parse fails) only once the
//! parser looks at them, even when only predicting ahead.

/// Relation operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelOp {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
    Ne,
}

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Num(f64),
    Letter(char),
    /// `\name` that is not a keyword (`\pi`, `\infty`, `\alpha`, `\circ`, ...).
    Symbol(String),
    /// `\sin`, `\log`, ... (name without the backslash).
    Func(&'static str),
    Sqrt,
    Frac,
    Binom,
    Mathit,
    /// `*`, `\times`, `\cdot`.
    Mul,
    /// `/`, `\div`, `:`.
    Div,
    Plus,
    Minus,
    Caret,
    Underscore,
    Bang,
    Bar,
    Comma,
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBraceLit,
    RBraceLit,
    LBracket,
    RBracket,
    Rel(RelOp),
    /// A character no lexer rule matches: the parse fails once the parser looks at it.
    Error,
    /// A valid sympy token this port does not model (`\int`, `\sum`, `\lim`, ...): no
    /// rule here accepts it.
    Unsupported,
}

const FUNCS: [&str; 21] = [
    "exp", "log", "ln", "sin", "cos", "tan", "csc", "sec", "cot", "arcsin", "arccos", "arctan",
    "arccsc", "arcsec", "arccot", "sinh", "cosh", "tanh", "arsinh", "arcosh", "artanh",
];

const SKIPPED: [&str; 10] = [
    "left",
    "right",
    "quad",
    "qquad",
    "thinspace",
    "medspace",
    "thickspace",
    "negthinspace",
    "negmedspace",
    "negthickspace",
];

fn command(name: &str) -> Option<Tok> {
    if SKIPPED.contains(&name) {
        return None;
    }
    if let Some(f) = FUNCS.iter().find(|f| **f == name) {
        return Some(Tok::Func(f));
    }
    Some(match name {
        "sqrt" => Tok::Sqrt,
        "frac" | "dfrac" | "tfrac" => Tok::Frac,
        "binom" | "dbinom" | "tbinom" => Tok::Binom,
        "mathit" => Tok::Mathit,
        "times" | "cdot" => Tok::Mul,
        "div" => Tok::Div,
        "leq" | "le" | "leqq" | "leqslant" => Tok::Rel(RelOp::Le),
        "geq" | "ge" | "geqq" | "geqslant" => Tok::Rel(RelOp::Ge),
        "neq" => Tok::Rel(RelOp::Ne),
        "int" | "sum" | "prod" | "lim" | "Sigma" | "Pi" | "to" | "rightarrow" => Tok::Unsupported,
        _ => Tok::Symbol(name.to_string()),
    })
}

fn lex_number(chars: &[char], mut i: usize) -> (f64, usize) {
    let start = i;
    let digit = |j: usize| chars.get(j).is_some_and(|c| c.is_ascii_digit());
    while digit(i) {
        i += 1;
    }
    while chars.get(i) == Some(&',') && digit(i + 1) && digit(i + 2) && digit(i + 3) {
        i += 4;
    }
    if chars.get(i) == Some(&'.') && digit(i + 1) {
        i += 1;
        while digit(i) {
            i += 1;
        }
    }
    let text: String = chars[start..i].iter().filter(|c| **c != ',').collect();
    (text.parse().unwrap_or(f64::NAN), i)
}

/// Tokenise the whole input (errors become [`Tok::Error`] tokens).
pub fn tokenize(input: &str) -> Vec<Tok> {
    let chars: Vec<char> = input.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            i += 1;
            continue;
        }
        if c == '\\' {
            let mut j = i + 1;
            while chars.get(j).is_some_and(|c| c.is_ascii_alphabetic()) {
                j += 1;
            }
            if j > i + 1 {
                let name: String = chars[i + 1..j].iter().collect();
                if let Some(t) = command(&name) {
                    toks.push(t);
                }
                i = j;
                continue;
            }
            match chars.get(i + 1) {
                Some(',' | ':' | ';' | '!') => {}
                Some('{') => toks.push(Tok::LBraceLit),
                Some('}') => toks.push(Tok::RBraceLit),
                _ => toks.push(Tok::Error),
            }
            i += 2;
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let (v, next) = lex_number(&chars, i);
            toks.push(Tok::Num(v));
            i = next;
            continue;
        }
        let t = match c {
            'a'..='z' | 'A'..='Z' => Tok::Letter(c),
            '+' => Tok::Plus,
            '-' => Tok::Minus,
            '*' => Tok::Mul,
            '/' | ':' => Tok::Div,
            '^' => Tok::Caret,
            '_' => Tok::Underscore,
            '!' => Tok::Bang,
            '|' => Tok::Bar,
            ',' => Tok::Comma,
            '(' => Tok::LParen,
            ')' => Tok::RParen,
            '{' => Tok::LBrace,
            '}' => Tok::RBrace,
            '[' => Tok::LBracket,
            ']' => Tok::RBracket,
            '=' => Tok::Rel(RelOp::Eq),
            '<' => Tok::Rel(RelOp::Lt),
            '>' => Tok::Rel(RelOp::Gt),
            _ => Tok::Error,
        };
        toks.push(t);
        i += 1;
    }
    toks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert_eq!(tokenize("1,000.5"), vec![Tok::Num(1000.5)]);
        assert_eq!(
            tokenize("1,2"),
            vec![Tok::Num(1.0), Tok::Comma, Tok::Num(2.0)]
        );
        assert_eq!(tokenize("\\pir"), vec![Tok::Symbol("pir".into())]);
        assert_eq!(tokenize("\\ln2"), vec![Tok::Func("ln"), Tok::Num(2.0)]);
        assert_eq!(
            tokenize("\\left(x\\right)\\,"),
            vec![Tok::LParen, Tok::Letter('x'), Tok::RParen]
        );
        assert_eq!(tokenize("5\\%"), vec![Tok::Num(5.0), Tok::Error]);
        assert_eq!(
            tokenize("x\\ge3"),
            vec![Tok::Letter('x'), Tok::Rel(RelOp::Ge), Tok::Num(3.0)]
        );
    }
}
