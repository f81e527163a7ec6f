//! A recursive-descent port of sympy 1.12's `parse_latex` (grammar `LaTeX.g4`, conversion
//! `_parse_latex_antlr.py`), enough to mirror what `grader.py`'s `symbolic_equal` sees:
//! `\frac`, `\sqrt[n]{}`, `^`, implicit products, `\cdot`/`\times`/`/`/`:`, `|x|`, `!`,
//! `\binom`, the `\sin`-family with or without parentheses, `f(x)` as an undefined function,
//! relations. Quirks kept: `\pi`, `e`, `i` are plain symbols; `\log` is base 10; a lone `x`
//! between two symbol-free factors means "times"; the top level parses the longest prefix
//! and ignores the rest (ANTLR without `EOF`: `1,2` parses as `1`), while any error inside
//! a bracket, fraction or argument fails the whole parse.

use super::lexer::{tokenize, RelOp, Tok};
use std::cell::Cell;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Num(f64),
    Sym(String),
    Inf,
    Add(Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Mul(Box<Expr>, Box<Expr>),
    Div(Box<Expr>, Box<Expr>),
    Pow(Box<Expr>, Box<Expr>),
    /// A named function (`sin`, `asin`, `abs`, `fact`, `binom`, or an undefined `f`).
    Func(String, Vec<Expr>),
    /// `log(arg, base)`.
    Log(Box<Expr>, Box<Expr>),
}

/// The result of a parse: an expression or a relation between two.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Expr(Expr),
    Rel(RelOp, Expr, Expr),
}

type PResult<T> = Result<T, ()>;

const MAX_DEPTH: usize = 200;
/// Longer inputs are not parsed (keeps expression trees, and their recursion, shallow).
const MAX_TOKENS: usize = 1000;

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    depth: usize,
    /// Work budget: backtracking over nested `f(` could otherwise take exponential time.
    fuel: usize,
    /// Set once the parser has looked at a lexer error: the lexer raises, so the whole
    /// parse fails, whatever backtracking happens afterwards.
    lex_error: Cell<bool>,
}

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

impl Expr {
    /// Whether the expression holds a free symbol.
    pub fn has_symbols(&self) -> bool {
        match self {
            Expr::Num(_) | Expr::Inf => false,
            Expr::Sym(_) => true,
            Expr::Neg(a) => a.has_symbols(),
            Expr::Add(a, c)
            | Expr::Mul(a, c)
            | Expr::Div(a, c)
            | Expr::Pow(a, c)
            | Expr::Log(a, c) => a.has_symbols() || c.has_symbols(),
            Expr::Func(_, args) => args.iter().any(Expr::has_symbols),
        }
    }
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        let t = self.toks.get(self.pos);
        if t == Some(&Tok::Error) {
            self.lex_error.set(true);
        }
        t
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.peek().cloned();
        self.pos += 1;
        t
    }

    fn expect(&mut self, t: Tok) -> PResult<()> {
        if self.peek() == Some(&t) {
            self.pos += 1;
            Ok(())
        } else {
            Err(())
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        self.fuel = self.fuel.saturating_sub(1);
        if self.depth > MAX_DEPTH || self.fuel == 0 {
            Err(())
        } else {
            Ok(())
        }
    }

    /// Run `f`; on failure rewind to where it started.
    fn attempt<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> Option<T> {
        let (pos, depth) = (self.pos, self.depth);
        match f(self) {
            Ok(v) => Some(v),
            Err(()) => {
                self.pos = pos;
                self.depth = depth;
                None
            }
        }
    }

    fn relation(&mut self) -> PResult<Parsed> {
        let lhs = self.expr()?;
        if let Some(Tok::Rel(op)) = self.peek().cloned() {
            self.pos += 1;
            let rhs = self.expr()?;
            if matches!(self.peek(), Some(Tok::Rel(_))) {
                // sympy cannot chain relationals: the conversion raises.
                return Err(());
            }
            return Ok(Parsed::Rel(op, lhs, rhs));
        }
        Ok(Parsed::Expr(lhs))
    }

    fn expr(&mut self) -> PResult<Expr> {
        self.enter()?;
        let mut acc = self.mp(true)?;
        loop {
            match self.peek() {
                Some(Tok::Plus) => {
                    self.pos += 1;
                    acc = Expr::Add(b(acc), b(self.mp(true)?));
                }
                Some(Tok::Minus) => {
                    self.pos += 1;
                    acc = Expr::Add(b(acc), b(Expr::Neg(b(self.mp(true)?))));
                }
                _ => break,
            }
        }
        self.depth -= 1;
        Ok(acc)
    }

    fn mp(&mut self, allow_func: bool) -> PResult<Expr> {
        let mut acc = self.unary(allow_func)?;
        loop {
            match self.peek() {
                Some(Tok::Mul) => {
                    self.pos += 1;
                    acc = Expr::Mul(b(acc), b(self.unary(allow_func)?));
                }
                Some(Tok::Div) => {
                    self.pos += 1;
                    acc = Expr::Div(b(acc), b(self.unary(allow_func)?));
                }
                _ => return Ok(acc),
            }
        }
    }

    /// `unary: (ADD|SUB) unary | postfix+` (`postfix postfix_nofunc*` without functions).
    fn unary(&mut self, allow_func: bool) -> PResult<Expr> {
        self.enter()?;
        let out = match self.peek() {
            Some(Tok::Plus) => {
                self.pos += 1;
                self.unary(allow_func)
            }
            Some(Tok::Minus) => {
                self.pos += 1;
                self.unary(allow_func).map(|e| match e {
                    Expr::Num(1.0) => Expr::Num(-1.0),
                    e => Expr::Neg(b(e)),
                })
            }
            _ => {
                let mut items = vec![self.postfix(true)?];
                while let Some(item) = self.attempt(|p| p.postfix(allow_func)) {
                    items.push(item);
                }
                Ok(postfix_product(items))
            }
        };
        self.depth -= 1;
        out
    }

    fn postfix(&mut self, allow_func: bool) -> PResult<Expr> {
        let mut e = self.exp(allow_func)?;
        while self.peek() == Some(&Tok::Bang) {
            self.pos += 1;
            e = Expr::Func("fact".into(), vec![e]);
        }
        Ok(e)
    }

    fn exp(&mut self, allow_func: bool) -> PResult<Expr> {
        let mut base = self.comp(allow_func)?;
        while self.peek() == Some(&Tok::Caret) {
            self.pos += 1;
            let exponent = self.braced_or_atom()?;
            if self.peek() == Some(&Tok::Underscore) {
                self.subscript()?;
            }
            base = Expr::Pow(b(base), b(exponent));
        }
        Ok(base)
    }

    fn braced_or_atom(&mut self) -> PResult<Expr> {
        if self.peek() == Some(&Tok::LBrace) {
            self.pos += 1;
            let e = self.expr()?;
            self.expect(Tok::RBrace)?;
            Ok(e)
        } else {
            self.atom()
        }
    }

    fn subscript(&mut self) -> PResult<String> {
        self.expect(Tok::Underscore)?;
        Ok(format!("_{{{:?}}}", self.braced_or_atom()?))
    }

    fn comp(&mut self, allow_func: bool) -> PResult<Expr> {
        self.enter()?;
        let out = self.comp_inner(allow_func);
        self.depth -= 1;
        out
    }

    fn comp_inner(&mut self, allow_func: bool) -> PResult<Expr> {
        let closing = match self.peek() {
            Some(Tok::LParen) => Some(Tok::RParen),
            Some(Tok::LBracket) => Some(Tok::RBracket),
            Some(Tok::LBrace) => Some(Tok::RBrace),
            Some(Tok::LBraceLit) => Some(Tok::RBraceLit),
            _ => None,
        };
        if let Some(close) = closing {
            self.pos += 1;
            let e = self.expr()?;
            self.expect(close)?;
            return Ok(e);
        }
        match self.peek().cloned() {
            Some(Tok::Bar) => {
                self.pos += 1;
                let e = self.expr()?;
                self.expect(Tok::Bar)?;
                Ok(Expr::Func("abs".into(), vec![e]))
            }
            Some(Tok::Frac) => {
                self.pos += 1;
                let (num, den) = (self.group_arg()?, self.group_arg()?);
                Ok(match num {
                    Expr::Num(1.0) => Expr::Pow(b(den), b(Expr::Num(-1.0))),
                    n => Expr::Div(b(n), b(den)),
                })
            }
            Some(Tok::Binom) => {
                self.pos += 1;
                let (n, k) = (self.group_arg()?, self.group_arg()?);
                Ok(Expr::Func("binom".into(), vec![n, k]))
            }
            Some(Tok::Sqrt) if allow_func => {
                self.pos += 1;
                let mut root = None;
                if self.peek() == Some(&Tok::LBracket) {
                    self.pos += 1;
                    root = Some(self.expr()?);
                    self.expect(Tok::RBracket)?;
                }
                let base = self.group_arg()?;
                Ok(match root {
                    None => Expr::Pow(b(base), b(Expr::Num(0.5))),
                    Some(r) => Expr::Pow(b(base), b(Expr::Div(b(Expr::Num(1.0)), b(r)))),
                })
            }
            Some(Tok::Func(name)) if allow_func => {
                self.pos += 1;
                self.func_normal(name)
            }
            Some(Tok::Letter(_) | Tok::Symbol(_)) if allow_func => {
                if let Some(f) = self.attempt(|p| p.applied_function()) {
                    return Ok(f);
                }
                self.atom()
            }
            _ => self.atom(),
        }
    }

    fn group_arg(&mut self) -> PResult<Expr> {
        self.expect(Tok::LBrace)?;
        let e = self.expr()?;
        self.expect(Tok::RBrace)?;
        Ok(e)
    }

    /// `(LETTER | SYMBOL) subexpr? L_PAREN args R_PAREN`: an undefined function.
    fn applied_function(&mut self) -> PResult<Expr> {
        let mut name = match self.next() {
            Some(Tok::Letter(c)) => c.to_string(),
            Some(Tok::Symbol(s)) => s,
            _ => return Err(()),
        };
        if self.peek() == Some(&Tok::Underscore) {
            name.push_str(&self.subscript()?);
        }
        self.expect(Tok::LParen)?;
        let mut args = vec![self.expr()?];
        while self.peek() == Some(&Tok::Comma) {
            self.pos += 1;
            args.push(self.expr()?);
        }
        self.expect(Tok::RParen)?;
        Ok(Expr::Func(format!("f:{name}"), args))
    }

    fn func_normal(&mut self, name: &'static str) -> PResult<Expr> {
        let mut sub = None;
        let mut sup = None;
        for _ in 0..2 {
            match self.peek() {
                Some(Tok::Underscore) if sub.is_none() => {
                    self.pos += 1;
                    sub = Some(self.braced_or_atom()?);
                }
                Some(Tok::Caret) if sup.is_none() => {
                    self.pos += 1;
                    sup = Some(self.braced_or_atom()?);
                }
                _ => break,
            }
        }
        let paren = self.attempt(|p| {
            p.expect(Tok::LParen)?;
            let e = p.expr()?;
            p.expect(Tok::RParen)?;
            Ok(e)
        });
        let arg = match paren {
            Some(e) => e,
            None => self.mp(false)?,
        };
        let mut fname = match name {
            "arcsin" | "arccos" | "arctan" | "arccsc" | "arcsec" | "arccot" => {
                format!("a{}", &name[3..])
            }
            "arsinh" | "arcosh" | "artanh" => format!("a{}", &name[2..]),
            other => other.to_string(),
        };
        let trig = [
            "sin", "cos", "tan", "csc", "sec", "cot", "sinh", "cosh", "tanh",
        ];
        let mut apply_pow = true;
        if trig.contains(&fname.as_str()) && sup == Some(Expr::Num(-1.0)) {
            fname = format!("a{fname}");
            apply_pow = false;
        }
        let expr = match fname.as_str() {
            "log" => Expr::Log(b(arg), b(sub.unwrap_or(Expr::Num(10.0)))),
            "ln" => Expr::Log(b(arg), b(sub.unwrap_or(Expr::Num(std::f64::consts::E)))),
            _ => Expr::Func(fname, vec![arg]),
        };
        Ok(match sup {
            Some(p) if apply_pow => Expr::Pow(b(expr), b(p)),
            _ => expr,
        })
    }

    fn atom(&mut self) -> PResult<Expr> {
        match self.next() {
            Some(Tok::Num(v)) => Ok(Expr::Num(v)),
            Some(Tok::Letter(c)) => {
                let mut name = c.to_string();
                if self.peek() == Some(&Tok::Underscore) {
                    name.push_str(&self.subscript()?);
                }
                Ok(Expr::Sym(name))
            }
            Some(Tok::Symbol(s)) => {
                if s == "infty" {
                    return Ok(Expr::Inf);
                }
                let mut name = s;
                if self.peek() == Some(&Tok::Underscore) {
                    name.push_str(&self.subscript()?);
                }
                Ok(Expr::Sym(name))
            }
            Some(Tok::Mathit) => {
                self.expect(Tok::LBrace)?;
                let mut name = String::new();
                while let Some(Tok::Letter(c)) = self.peek().cloned() {
                    name.push(c);
                    self.pos += 1;
                }
                self.expect(Tok::RBrace)?;
                Ok(Expr::Sym(name))
            }
            _ => Err(()),
        }
    }
}

/// `convert_postfix_list`: an implicit product, where a bare `x` between two symbol-free
/// factors is read as a multiplication sign.
fn postfix_product(items: Vec<Expr>) -> Expr {
    let n = items.len();
    let mut kept: Vec<Expr> = Vec::with_capacity(n);
    for i in 0..n {
        let is_x = items[i] == Expr::Sym("x".into());
        if is_x && i > 0 && i + 1 < n && !items[i - 1].has_symbols() && !items[i + 1].has_symbols()
        {
            continue;
        }
        kept.push(items[i].clone());
    }
    let mut it = kept.into_iter().rev();
    let last = it.next().unwrap_or(Expr::Num(1.0));
    it.fold(last, |acc, e| Expr::Mul(b(e), b(acc)))
}

/// `parse_latex(s)` (non-strict): `None` where sympy raises.
pub fn parse_latex(s: &str) -> Option<Parsed> {
    let toks = tokenize(s);
    if toks.len() > MAX_TOKENS {
        return None;
    }
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
        fuel: 100_000,
        lex_error: Cell::new(false),
    };
    let parsed = p.relation().ok();
    if p.lex_error.get() {
        return None;
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert!(parse_latex("\\frac{1}{2}").is_some());
        assert!(parse_latex("1,2").is_some());
        assert!(parse_latex("(1,2)").is_none());
        // LL prediction exits the product at `{,` and the top level ignores the rest.
        assert!(parse_latex("1{,}000").is_some());
        assert!(parse_latex("\\2").is_none());
        // The lexer error is reached while predicting whether the product continues.
        assert!(parse_latex("1\\\\2").is_none());
        assert!(parse_latex("\\begin{pmatrix}1\\\\2\\end{pmatrix}").is_none());
        assert!(parse_latex("").is_none());
        assert!(matches!(
            parse_latex("x\\ge3"),
            Some(Parsed::Rel(RelOp::Ge, _, _))
        ));
    }

    #[test]
    fn deep_nesting_fails_cleanly() {
        let s = "(".repeat(5000) + &")".repeat(5000);
        assert!(parse_latex(&s).is_none());
        let s = "x(".repeat(60) + "1";
        assert!(parse_latex(&s).is_some());
    }
}
