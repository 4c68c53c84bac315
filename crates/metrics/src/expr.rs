//! The predicate language: `arg1 == 3 and ret > 0`, `(arg2 + arg3) * 2 >= 4096`.
//!
//! Operands: integers, `arg1`..`arg6` (at an entry), `ret` (at an exit),
//! `tid`. Operators, loosest first: `or`, `and`, comparisons
//! (`< > <= >= == !=`), `+ -`, `* /`; parentheses group.

use crate::{Error, Result};
use weft_plan::{BinOp, Expr};

/// The longest expression text: a predicate is a line, not a program.
pub const MAX_TEXT: usize = 1000;
/// The deepest expression (levels of operations, parentheses included),
/// which bounds both the parser's recursion and the stack the generated
/// code uses in the target.
pub const MAX_DEPTH: usize = 32;

/// Parses a predicate or value expression.
pub fn parse_expr(text: &str) -> Result<Expr> {
    parse_expr_with(text, &|_| None)
}

/// Parses an expression in which other names (the counters of a
/// definition file) resolve through `names`.
pub fn parse_expr_with(text: &str, names: &dyn Fn(&str) -> Option<Expr>) -> Result<Expr> {
    let bad = |why: String| Error::BadExpr {
        expr: shown(text),
        why,
    };
    if text.len() > MAX_TEXT {
        return Err(bad(format!(
            "{} characters, more than the {MAX_TEXT} an expression may have",
            text.len()
        )));
    }
    let tokens = tokenize(text)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        nesting: 0,
        text,
        names,
    };
    let e = p.or()?;
    if p.pos != p.tokens.len() {
        return Err(p.error(format!("unexpected '{}'", p.tokens[p.pos])));
    }
    if e.depth() > MAX_DEPTH {
        return Err(bad(format!(
            "{} levels of operations, more than the {MAX_DEPTH} an expression may have",
            e.depth()
        )));
    }
    Ok(e)
}

fn tokenize(text: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(b[s..i].iter().collect());
        } else if i + 1 < b.len()
            && ["<=", ">=", "==", "!=", "&&", "||"].contains(&&*format!("{}{}", c, b[i + 1]))
        {
            out.push(format!("{}{}", c, b[i + 1]));
            i += 2;
        } else if "+-*/<>()".contains(c) {
            out.push(c.to_string());
            i += 1;
        } else {
            return Err(Error::BadExpr {
                expr: shown(text),
                why: format!("unexpected character '{c}'"),
            });
        }
    }
    Ok(out)
}

/// An expression as error messages quote it: its first 60 characters.
fn shown(text: &str) -> String {
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

struct Parser<'a> {
    tokens: Vec<String>,
    pos: usize,
    /// Parentheses and unary minuses open at `pos`.
    nesting: usize,
    text: &'a str,
    names: &'a dyn Fn(&str) -> Option<Expr>,
}

impl Parser<'_> {
    fn error(&self, why: String) -> Error {
        Error::BadExpr {
            expr: shown(self.text),
            why,
        }
    }

    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.pos).map(String::as_str)
    }

    fn binary(
        &mut self,
        ops: &[(&str, BinOp)],
        next: fn(&mut Self) -> Result<Expr>,
    ) -> Result<Expr> {
        let mut left = next(self)?;
        while let Some(op) = self
            .peek()
            .and_then(|t| ops.iter().find(|(s, _)| *s == t).map(|(_, o)| *o))
        {
            self.pos += 1;
            let right = next(self)?;
            left = Expr::bin(op, left, right);
        }
        Ok(left)
    }

    fn or(&mut self) -> Result<Expr> {
        self.binary(&[("or", BinOp::Or), ("||", BinOp::Or)], Self::and)
    }

    fn and(&mut self) -> Result<Expr> {
        self.binary(&[("and", BinOp::And), ("&&", BinOp::And)], Self::cmp)
    }

    fn cmp(&mut self) -> Result<Expr> {
        self.binary(
            &[
                ("<=", BinOp::Le),
                (">=", BinOp::Ge),
                ("==", BinOp::Eq),
                ("!=", BinOp::Ne),
                ("<", BinOp::Lt),
                (">", BinOp::Gt),
            ],
            Self::sum,
        )
    }

    fn sum(&mut self) -> Result<Expr> {
        self.binary(&[("+", BinOp::Add), ("-", BinOp::Sub)], Self::product)
    }

    fn product(&mut self) -> Result<Expr> {
        self.binary(&[("*", BinOp::Mul), ("/", BinOp::Div)], Self::atom)
    }

    fn atom(&mut self) -> Result<Expr> {
        let Some(t) = self.peek().map(str::to_string) else {
            return Err(self.error("expression ends too soon".into()));
        };
        self.pos += 1;
        if (t == "(" || t == "-") && self.nesting >= MAX_DEPTH {
            return Err(self.error(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        match t.as_str() {
            "(" => {
                self.nesting += 1;
                let e = self.or()?;
                self.nesting -= 1;
                if self.peek() != Some(")") {
                    return Err(self.error("missing ')'".into()));
                }
                self.pos += 1;
                Ok(e)
            }
            "-" => {
                self.nesting += 1;
                let e = self.atom()?;
                self.nesting -= 1;
                Ok(Expr::bin(BinOp::Sub, Expr::Const(0), e))
            }
            "ret" => Ok(Expr::Ret),
            name if (self.names)(name).is_some() => Ok((self.names)(name).expect("checked")),
            "tid" => Ok(Expr::Tid),
            a if a.starts_with("arg") => match a[3..].parse::<u8>() {
                Ok(n @ 1..=6) => Ok(Expr::Arg(n)),
                _ => Err(self.error(format!("'{a}': arguments are arg1 to arg6"))),
            },
            n => n
                .strip_prefix("0x")
                .map_or_else(|| n.parse::<i64>(), |h| i64::from_str_radix(h, 16))
                .map(Expr::Const)
                .map_err(|_| self.error(format!("'{n}' is not a number, argN, ret or tid"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_forms() {
        let e = parse_expr("arg1 == 3 and ret > 0 or tid == 7").unwrap();
        let want = Expr::bin(
            BinOp::Or,
            Expr::bin(
                BinOp::And,
                Expr::bin(BinOp::Eq, Expr::Arg(1), Expr::Const(3)),
                Expr::bin(BinOp::Gt, Expr::Ret, Expr::Const(0)),
            ),
            Expr::bin(BinOp::Eq, Expr::Tid, Expr::Const(7)),
        );
        assert_eq!(e, want);
        let e = parse_expr("(arg2 + 1) * 2 >= 0x10").unwrap();
        assert_eq!(
            e,
            Expr::bin(
                BinOp::Ge,
                Expr::bin(
                    BinOp::Mul,
                    Expr::bin(BinOp::Add, Expr::Arg(2), Expr::Const(1)),
                    Expr::Const(2)
                ),
                Expr::Const(16)
            )
        );
        assert!(parse_expr("arg7 > 1").is_err());
        assert!(parse_expr("arg1 >").is_err());
        assert!(parse_expr("(arg1").is_err());
        assert!(parse_expr("arg1 $ 2").is_err());
    }

    fn why(text: &str) -> String {
        match parse_expr(text) {
            Err(Error::BadExpr { why, .. }) => why,
            other => panic!("{text:.80}: {other:?}"),
        }
    }

    #[test]
    fn size_and_depth_are_bounded() {
        // Deep parentheses and unary minuses stop at the nesting bound,
        // long before the parser's recursion could exhaust a stack.
        let deep = format!("{}arg1{}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(why(&deep).contains("characters"));
        let deep = format!("{}arg1{}", "(".repeat(400), ")".repeat(400));
        assert!(why(&deep).contains("nested"), "{}", why(&deep));
        assert!(why(&"-".repeat(500)).contains("nested"));
        // A flat chain is as deep as it is long.
        let chain = vec!["arg1"; 100].join(" + ");
        assert!(why(&chain).contains("levels"), "{}", why(&chain));
        let ok = vec!["arg1"; MAX_DEPTH + 1].join(" + ");
        assert_eq!(parse_expr(&ok).unwrap().depth(), MAX_DEPTH);
        let nested = format!("{}arg1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(parse_expr(&nested).unwrap(), Expr::Arg(1));
        // Error messages quote a long expression's start only.
        let long = format!("arg1 == {}", "1".repeat(2000));
        let Err(Error::BadExpr { expr, .. }) = parse_expr(&long) else {
            panic!("a 2000-digit number parsed")
        };
        assert!(expr.len() < 70, "{expr}");
    }

    proptest::proptest! {
        /// Any text: an expression within the bounds, or an error, never a
        /// panic or an overflowed stack.
        #[test]
        fn any_text_parses_or_is_refused(text in "[-+*/<>=!&|() a-z0-9_]{0,300}") {
            if let Ok(e) = parse_expr(&text) {
                proptest::prop_assert!(e.depth() <= MAX_DEPTH);
            }
        }

        /// Texts made of the language's own tokens reach deeper into the parser.
        #[test]
        fn token_soup_parses_or_is_refused(
            tokens in proptest::collection::vec(
                proptest::sample::select(vec![
                    "arg1", "ret", "tid", "7", "0x10", "(", ")", "-", "+", "*", "/",
                    "==", "<", ">=", "and", "or", "&&", "||",
                ]),
                0..120,
            )
        ) {
            if let Ok(e) = parse_expr(&tokens.join(" ")) {
                proptest::prop_assert!(e.depth() <= MAX_DEPTH);
            }
        }
    }
}
