//! Integer and condition expressions of the surface format: loop ranges (`For(i, 0..M, [..])`), conditions
//! (`If(stage > 0, [..])`), rank arithmetic (`Rank(stage + 1)`) and interpolated names (`"act{i}"`). Expressions
//! are parsed when the program is deserialized and evaluated during SPMD expansion, per rank and per iteration;
//! `min(a, b)` and `max(a, b)` are the only functions.
//!
//! A hand-written recursive-descent parser: the grammar is a dozen lines, and an expression crate would bring
//! floating point and functions the format must not have (choices stay integer, output stays deterministic).
//! Nesting is bounded by [`MAX_NESTING_DEPTH`]; arithmetic is checked, so no input panics.

use super::MAX_NESTING_DEPTH;
use std::borrow::Cow;
use std::fmt;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Int(i64),
    Bool(bool),
    Var(String),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `min(a, b)` / `max(a, b)`: the smaller / larger of two numbers (Megatron's warm-up count is
    /// `min(stages - stage - 1, microbatches)`).
    Call(Func, Box<Expr>, Box<Expr>),
}

/// A function of two numbers: the only functions the format has (integer in, integer out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Min,
    Max,
}

impl Func {
    fn name(self) -> &'static str {
        match self {
            Func::Min => "min",
            Func::Max => "max",
        }
    }

    /// The function called `name`, if there is one (also what the scanner and loop variables consult).
    pub fn from_name(name: &str) -> Option<Func> {
        [Func::Min, Func::Max].into_iter().find(|f| f.name() == name)
    }
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

/// The value of an expression: a number (ranks, counts, bytes) or a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Bool(bool),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// The names every expression may use besides the loop variables in scope: `rank` (alias `stage`), the rank the
/// thread runs for, and `ranks` (alias `stages`), the number of ranks.
pub const BUILTIN_VARS: &[&str] = &["rank", "ranks", "stage", "stages"];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Ident(String),
    Op(&'static str),
    Open,
    Close,
    Comma,
}

const OPS: &[&str] = &["<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "%", "<", ">", "!"];

fn tokens(text: &str) -> Result<Vec<Tok>, String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            let digits: String = text[start..i].chars().filter(|&c| c != '_').collect();
            let v = digits.parse::<i64>().map_err(|_| format!("number `{}` is too large", &text[start..i]))?;
            out.push(Tok::Int(v));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_string()));
        } else if c == b'(' {
            out.push(Tok::Open);
            i += 1;
        } else if c == b')' {
            out.push(Tok::Close);
            i += 1;
        } else if c == b',' {
            out.push(Tok::Comma);
            i += 1;
        } else if let Some(op) = OPS.iter().find(|op| b[i..].starts_with(op.as_bytes())) {
            out.push(Tok::Op(op));
            i += op.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(format!("unexpected `{ch}` in expression `{text}`"));
        }
    }
    Ok(out)
}

struct Parser<'t> {
    toks: Vec<Tok>,
    pos: usize,
    text: &'t str,
}

impl Parser<'_> {
    fn peek_op(&self) -> Option<&'static str> {
        match self.toks.get(self.pos) {
            Some(Tok::Op(op)) => Some(op),
            _ => None,
        }
    }

    fn deeper(&self, depth: usize) -> Result<usize, String> {
        if depth >= MAX_NESTING_DEPTH {
            Err(format!("expression `{}` is nested more than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels deep", self.text))
        } else {
            Ok(depth + 1)
        }
    }

    /// One binary level: `next (op next)*` for the operators of `level` (0 = `||` .. 4 = `*`), left-associative;
    /// comparisons (level 2) do not chain.
    fn binary(&mut self, level: usize, depth: usize) -> Result<Expr, String> {
        const LEVELS: &[&[(&str, BinOp)]] = &[
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[("<", BinOp::Lt), ("<=", BinOp::Le), (">", BinOp::Gt), (">=", BinOp::Ge), ("==", BinOp::Eq), ("!=", BinOp::Ne)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)],
        ];
        let next = |p: &mut Self, depth| if level + 1 < LEVELS.len() { p.binary(level + 1, depth) } else { p.unary(depth) };
        let mut left = next(self, depth)?;
        // Every operator of a chain adds a level to the (left-deep) tree: counted, so that no tree is deeper than
        // the limit (evaluating, printing and dropping it recurse).
        let mut depth = depth;
        while let Some(op) = self.peek_op().and_then(|o| LEVELS[level].iter().find(|(s, _)| *s == o)).map(|(_, b)| *b) {
            self.pos += 1;
            depth = self.deeper(depth)?;
            let right = next(self, depth)?;
            left = Expr::Bin(op, Box::new(left), Box::new(right));
            if level == 2 {
                break;
            }
        }
        Ok(left)
    }

    fn unary(&mut self, depth: usize) -> Result<Expr, String> {
        let depth = self.deeper(depth)?;
        match self.toks.get(self.pos).cloned() {
            Some(Tok::Op("-")) => {
                self.pos += 1;
                Ok(Expr::Neg(Box::new(self.unary(depth)?)))
            }
            Some(Tok::Op("!")) => {
                self.pos += 1;
                Ok(Expr::Not(Box::new(self.unary(depth)?)))
            }
            Some(Tok::Int(v)) => {
                self.pos += 1;
                Ok(Expr::Int(v))
            }
            Some(Tok::Ident(name)) if self.toks.get(self.pos + 1) == Some(&Tok::Open) => {
                let Some(func) = Func::from_name(&name) else {
                    return Err(format!("unknown function `{name}` in expression `{}` (there are `min(a, b)` and `max(a, b)`)", self.text));
                };
                let text = self.text;
                let arity = || format!("`{name}` takes two numbers, `{name}(a, b)`, in expression `{text}`");
                self.pos += 2;
                if self.toks.get(self.pos) == Some(&Tok::Close) {
                    return Err(arity());
                }
                let a = self.binary(0, depth)?;
                if self.toks.get(self.pos) != Some(&Tok::Comma) {
                    return Err(arity());
                }
                self.pos += 1;
                let b = self.binary(0, depth)?;
                if self.toks.get(self.pos) != Some(&Tok::Close) {
                    return Err(arity());
                }
                self.pos += 1;
                Ok(Expr::Call(func, Box::new(a), Box::new(b)))
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                Ok(match name.as_str() {
                    "true" => Expr::Bool(true),
                    "false" => Expr::Bool(false),
                    _ => Expr::Var(name),
                })
            }
            Some(Tok::Open) => {
                self.pos += 1;
                let e = self.binary(0, depth)?;
                if self.toks.get(self.pos) != Some(&Tok::Close) {
                    return Err(format!("missing `)` in expression `{}`", self.text));
                }
                self.pos += 1;
                Ok(e)
            }
            Some(Tok::Close) => Err(format!("unexpected `)` in expression `{}`", self.text)),
            Some(Tok::Comma) => Err(format!("unexpected `,` in expression `{}`", self.text)),
            Some(Tok::Op(op)) => Err(format!("unexpected `{op}` in expression `{}`", self.text)),
            None => Err(format!("expression `{}` ends too early", self.text)),
        }
    }
}

/// Parses an expression: integers, variables, `true`/`false`, `+ - * / %`, comparisons `< <= > >= == !=`,
/// `&& || !`, parentheses, `min(a, b)` and `max(a, b)`.
pub fn parse(text: &str) -> Result<Expr, String> {
    if text.trim().is_empty() {
        return Err("empty expression".to_string());
    }
    let mut p = Parser { toks: tokens(text)?, pos: 0, text };
    let e = p.binary(0, 0)?;
    match p.toks.get(p.pos) {
        None => Ok(e),
        Some(_) => Err(format!("unexpected text after the expression in `{text}`")),
    }
}

/// Parses a loop range `start..end` (end excluded).
pub fn parse_range(text: &str) -> Result<(Expr, Expr), String> {
    let Some((a, b)) = text.split_once("..") else {
        return Err(format!("`{text}` is not a range: write `start..end`, e.g. `0..4` (end excluded)"));
    };
    if b.starts_with('=') {
        return Err(format!("`{text}`: only half-open ranges `start..end` are supported (end excluded)"));
    }
    Ok((parse(a)?, parse(b)?))
}

impl Expr {
    /// Evaluates the expression; `lookup` gives the value of a variable (`None`: not in scope).
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Result<Value, String> {
        self.eval_at(lookup, 0)
    }

    fn eval_at(&self, lookup: &dyn Fn(&str) -> Option<i64>, depth: usize) -> Result<Value, String> {
        // Parsing bounds the depth; this guard keeps hand-built trees from exhausting the stack too.
        if depth > 4 * MAX_NESTING_DEPTH {
            return Err(format!("expression nested more than MAX_NESTING_DEPTH = {MAX_NESTING_DEPTH} levels deep"));
        }
        let int = |e: &Expr| -> Result<i64, String> {
            match e.eval_at(lookup, depth + 1)? {
                Value::Int(v) => Ok(v),
                Value::Bool(b) => Err(format!("`{e}` is a condition ({b}), where a number is needed")),
            }
        };
        let cond = |e: &Expr| -> Result<bool, String> {
            match e.eval_at(lookup, depth + 1)? {
                Value::Bool(b) => Ok(b),
                Value::Int(v) => Err(format!("`{e}` is a number ({v}), where a condition is needed: compare it, e.g. `{e} > 0`")),
            }
        };
        let overflow = || format!("`{self}` overflows a 64-bit integer");
        Ok(match self {
            Expr::Int(v) => Value::Int(*v),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Var(name) => Value::Int(lookup(name).ok_or_else(|| format!("unknown variable `{name}`"))?),
            Expr::Neg(e) => Value::Int(int(e)?.checked_neg().ok_or_else(overflow)?),
            Expr::Call(Func::Min, a, b) => Value::Int(int(a)?.min(int(b)?)),
            Expr::Call(Func::Max, a, b) => Value::Int(int(a)?.max(int(b)?)),
            Expr::Not(e) => Value::Bool(!cond(e)?),
            Expr::Bin(op, a, b) => match op {
                BinOp::And => Value::Bool(cond(a)? && cond(b)?),
                BinOp::Or => Value::Bool(cond(a)? || cond(b)?),
                BinOp::Lt => Value::Bool(int(a)? < int(b)?),
                BinOp::Le => Value::Bool(int(a)? <= int(b)?),
                BinOp::Gt => Value::Bool(int(a)? > int(b)?),
                BinOp::Ge => Value::Bool(int(a)? >= int(b)?),
                BinOp::Eq => Value::Bool(a.eval_at(lookup, depth + 1)? == b.eval_at(lookup, depth + 1)?),
                BinOp::Ne => Value::Bool(a.eval_at(lookup, depth + 1)? != b.eval_at(lookup, depth + 1)?),
                BinOp::Add => Value::Int(int(a)?.checked_add(int(b)?).ok_or_else(overflow)?),
                BinOp::Sub => Value::Int(int(a)?.checked_sub(int(b)?).ok_or_else(overflow)?),
                BinOp::Mul => Value::Int(int(a)?.checked_mul(int(b)?).ok_or_else(overflow)?),
                BinOp::Div | BinOp::Rem => {
                    let (x, y) = (int(a)?, int(b)?);
                    if y == 0 {
                        return Err(format!("`{self}` divides by zero"));
                    }
                    let v = if *op == BinOp::Div { x.checked_div_euclid(y) } else { x.checked_rem_euclid(y) };
                    Value::Int(v.ok_or_else(overflow)?)
                }
            },
        })
    }
}

impl fmt::Display for Expr {
    /// Fully parenthesized where an operator nests, so the text reads unambiguously in messages.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Expr::Int(v) => write!(f, "{v}"),
            Expr::Bool(b) => write!(f, "{b}"),
            Expr::Var(v) => f.write_str(v),
            Expr::Neg(e) => write!(f, "-{}", Paren(e)),
            Expr::Not(e) => write!(f, "!{}", Paren(e)),
            Expr::Bin(op, a, b) => write!(f, "{} {} {}", Paren(a), op.symbol(), Paren(b)),
            Expr::Call(func, a, b) => write!(f, "{}({a}, {b})", func.name()),
        }
    }
}

struct Paren<'e>(&'e Expr);

impl fmt::Display for Paren<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            Expr::Bin(..) => write!(f, "({})", self.0),
            e => write!(f, "{e}"),
        }
    }
}

/// Replaces every `{expr}` of `text` by the expression's integer value; `{{` and `}}` stand for `{` and `}`.
/// Text without braces is borrowed.
pub fn interpolate<'t>(text: &'t str, lookup: &dyn Fn(&str) -> Option<i64>) -> Result<Cow<'t, str>, String> {
    if !text.contains(['{', '}']) {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let brace = rest.as_bytes()[i];
        let after = &rest[i + 1..];
        if after.as_bytes().first() == Some(&brace) {
            out.push(brace as char);
            rest = &after[1..];
            continue;
        }
        if brace == b'}' {
            return Err(format!("unmatched `}}` in `{text}` (write `}}}}` for a literal brace)"));
        }
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed `{{` in `{text}` (write `{{{{` for a literal brace)"));
        };
        let inside = &after[..end];
        // `{i}`: a variable alone needs no parse (most names of a loop are written so).
        let simple = inside.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            && inside.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
            && inside != "true"
            && inside != "false";
        let value = if simple { lookup(inside).map(Value::Int).ok_or_else(|| format!("unknown variable `{inside}`"))? } else { parse(inside)?.eval(lookup)? };
        match value {
            Value::Int(v) => out.push_str(&v.to_string()),
            Value::Bool(_) => return Err(format!("`{{{}}}` in `{text}` is a condition; a name needs a number", &after[..end])),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<i64> {
        match name {
            "stage" | "rank" => Some(3),
            "stages" | "ranks" => Some(4),
            "i" => Some(2),
            _ => None,
        }
    }

    fn eval(text: &str) -> Result<Value, String> {
        parse(text)?.eval(&vars)
    }

    #[test]
    fn arithmetic_precedence_and_euclidean_division() {
        assert_eq!(eval("stage + 1"), Ok(Value::Int(4)));
        assert_eq!(eval("1 + 2 * 3 - 4 / 2"), Ok(Value::Int(5)));
        assert_eq!(eval("(stage + 1) % stages"), Ok(Value::Int(0)));
        assert_eq!(eval("(stage - 4) % stages"), Ok(Value::Int(3)), "a remainder is never negative");
        assert_eq!(eval("-i - -1"), Ok(Value::Int(-1)));
        assert_eq!(eval("1_000 * 2"), Ok(Value::Int(2000)));
    }

    #[test]
    fn min_and_max() {
        assert_eq!(eval("min(stages - stage - 1, 8)"), Ok(Value::Int(0)));
        assert_eq!(eval("max(stage, i) * 2"), Ok(Value::Int(6)));
        assert_eq!(eval("min(max(i, 1), min(stage, 10)) + 1"), Ok(Value::Int(3)));
        assert!(eval("min(i)").unwrap_err().contains("takes two numbers"));
        assert!(eval("max()").unwrap_err().contains("takes two numbers"));
        assert!(eval("min(i, 1, 2)").unwrap_err().contains("takes two numbers"));
        assert!(eval("abs(i)").unwrap_err().contains("unknown function `abs`"));
        assert!(eval("min(i > 1, 2)").unwrap_err().contains("where a number is needed"));
        assert!(eval("i, 2").unwrap_err().contains("after the expression"));
        assert!(eval("min").unwrap_err().contains("unknown variable `min`"), "a name without `(` is a variable");
    }

    #[test]
    fn conditions() {
        assert_eq!(eval("stage > 0"), Ok(Value::Bool(true)));
        assert_eq!(eval("stage > 0 && stage + 1 < stages"), Ok(Value::Bool(false)));
        assert_eq!(eval("!(i == 2) || false"), Ok(Value::Bool(false)));
        assert_eq!(eval("i != 2 || true"), Ok(Value::Bool(true)));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(eval("j + 1"), Err("unknown variable `j`".to_string()));
        assert!(eval("stage / (i - 2)").unwrap_err().contains("divides by zero"));
        assert!(eval("9223372036854775807 + stage").unwrap_err().contains("overflows"));
        assert!(eval("99999999999999999999").unwrap_err().contains("too large"));
        assert!(eval("stage +").unwrap_err().contains("ends too early"));
        assert!(eval("(stage").unwrap_err().contains("missing `)`"));
        assert!(eval("stage 1").unwrap_err().contains("after the expression"));
        assert!(eval("stage $ 1").unwrap_err().contains("unexpected `$`"));
        assert!(eval("stage < 1 < 2").unwrap_err().contains("after the expression"), "comparisons do not chain");
        assert!(eval("stage && true").unwrap_err().contains("where a condition is needed"));
        assert!(eval("(stage > 1) + 1").unwrap_err().contains("where a number is needed"));
        assert!(parse("").unwrap_err().contains("empty"));
        let deep = format!("{}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(parse(&deep).unwrap_err().contains("MAX_NESTING_DEPTH"));
        assert!(parse(&"-".repeat(10_000)).unwrap_err().contains("MAX_NESTING_DEPTH"));
        assert!(parse(&vec!["1"; 10_000].join(" + ")).unwrap_err().contains("MAX_NESTING_DEPTH"), "long chains too");
        assert_eq!(eval(&vec!["1"; 100].join(" + ")), Ok(Value::Int(100)));
    }

    #[test]
    fn ranges() {
        let (a, b) = parse_range("0..stages - stage").unwrap();
        assert_eq!((a.eval(&vars), b.eval(&vars)), (Ok(Value::Int(0)), Ok(Value::Int(1))));
        assert!(parse_range("4").unwrap_err().contains("not a range"));
        assert!(parse_range("0..=4").unwrap_err().contains("half-open"));
    }

    #[test]
    fn interpolation() {
        assert_eq!(interpolate("act", &vars).unwrap(), "act");
        assert_eq!(interpolate("act{i}", &vars).unwrap(), "act2");
        assert_eq!(interpolate("x@{stage - 1}", &vars).unwrap(), "x@2");
        assert_eq!(interpolate("{{lit}}{i * 2}", &vars).unwrap(), "{lit}4");
        assert!(interpolate("act{i", &vars).unwrap_err().contains("unclosed"));
        assert!(interpolate("act}", &vars).unwrap_err().contains("unmatched"));
        assert!(interpolate("act{j}", &vars).unwrap_err().contains("unknown variable `j`"));
        assert!(interpolate("act{i > 1}", &vars).unwrap_err().contains("condition"));
    }

    #[test]
    fn display_round_trips() {
        for t in ["stage + 1", "(stage + 1) % stages", "!(i == 2) || (stage > 0)", "-(i * 2)", "min(stage - 1, max(i, 2)) + 1"] {
            let e = parse(t).unwrap();
            assert_eq!(parse(&e.to_string()).unwrap(), e, "{t} -> {e}");
        }
    }
}
