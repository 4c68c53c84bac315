//! The predicate language: `arg1 == 3 and ret > 0`, `(arg2 + arg3) * 2 >= 4096`.
//!
//! Operands: integers, `arg1`..`arg6` (at an entry), `ret` (at an exit),
//! `tid`. Operators, loosest first: `or`, `and`, comparisons
//! (`< > <= >= == !=`), `+ -`, `* /`; parentheses group.

use crate::{Error, Result};
use weft_plan::{BinOp, Expr};

/// Parses a predicate or value expression.
pub fn parse_expr(text: &str) -> Result<Expr> {
    parse_expr_with(text, &|_| None)
}

/// Parses an expression in which other names (the counters of a
/// definition file) resolve through `names`.
pub fn parse_expr_with(text: &str, names: &dyn Fn(&str) -> Option<Expr>) -> Result<Expr> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        tokens,
        pos: 0,
        text,
        names,
    };
    let e = p.or()?;
    if p.pos != p.tokens.len() {
        return Err(p.error(format!("unexpected '{}'", p.tokens[p.pos])));
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
                expr: text.into(),
                why: format!("unexpected character '{c}'"),
            });
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: Vec<String>,
    pos: usize,
    text: &'a str,
    names: &'a dyn Fn(&str) -> Option<Expr>,
}

impl Parser<'_> {
    fn error(&self, why: String) -> Error {
        Error::BadExpr {
            expr: self.text.into(),
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
        match t.as_str() {
            "(" => {
                let e = self.or()?;
                if self.peek() != Some(")") {
                    return Err(self.error("missing ')'".into()));
                }
                self.pos += 1;
                Ok(e)
            }
            "-" => Ok(Expr::bin(BinOp::Sub, Expr::Const(0), self.atom()?)),
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
}
