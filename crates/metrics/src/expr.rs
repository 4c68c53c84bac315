//! The predicate language: `arg1 == 3 and ret > 0`, `(arg2 + arg3) * 2 >= 4096`.
//!
//! Operands: integers, `arg1`..`arg6` (at an entry), `ret` (at an exit),
//! `tid`. Operators, loosest first: `or`, `and`, comparisons
//! (`< > <= >= == !=`), `+ -`, `* /`; parentheses group.
//!
//! Values are 64-bit two's complement integers, compared signed. An integer
//! constant is decimal or `0x` hexadecimal (1 to 16 digits), from
//! `-9223372036854775808` (`i64::MIN`) to `18446744073709551615`
//! (`u64::MAX`, `0xFFFFFFFFFFFFFFFF`): a constant above `i64::MAX` is the
//! same 64 bits as a negative one (`0xFFFFFFFFFFFFFFFF` is `-1`), as an
//! unsigned argument's bits are. Anything beyond is refused.

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
                // A negative constant is one: `-9223372036854775808` is
                // i64::MIN, whose magnitude alone is above i64::MAX.
                if let Some(n) = self.peek().filter(|n| is_number(n)).map(str::to_string) {
                    self.pos += 1;
                    return match literal(&n) {
                        Ok(m) if m <= 1 << 63 => Ok(Expr::Const((m as i64).wrapping_neg())),
                        Ok(_) => Err(self.error(out_of_range(&format!("-{n}")))),
                        Err(why) => Err(self.error(why)),
                    };
                }
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
            // Above i64::MAX: the same 64 bits as a negative value.
            n if is_number(n) => literal(n)
                .map(|v| Expr::Const(v as i64))
                .map_err(|why| self.error(why)),
            n => Err(self.error(format!("'{n}' is not a number, argN, ret or tid"))),
        }
    }
}

/// Whether token `t` is meant as a number (it starts with a digit).
fn is_number(t: &str) -> bool {
    t.starts_with(|c: char| c.is_ascii_digit())
}

/// Why the constant `text` is refused for its size.
fn out_of_range(text: &str) -> String {
    format!(
        "'{text}' is out of range: integer constants are 64 bits, from -9223372036854775808 \
         (i64::MIN) to 18446744073709551615 (u64::MAX, 0xFFFFFFFFFFFFFFFF)"
    )
}

/// The value of an integer constant, decimal (up to u64::MAX) or `0x`
/// hexadecimal (1 to 16 digits, leading zeros aside), as 64 bits.
fn literal(text: &str) -> std::result::Result<u64, String> {
    let not_a_number = || format!("'{text}' is not a number, argN, ret or tid");
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    // from_str_radix would take a sign: only digits are a constant here.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(not_a_number());
    }
    u64::from_str_radix(digits, radix).map_err(|_| out_of_range(text))
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

    #[test]
    fn constants_cover_the_i64_and_u64_ranges() {
        let constant = |text: &str| match parse_expr(text) {
            Ok(Expr::Const(v)) => v,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(constant("-9223372036854775808"), i64::MIN);
        assert_eq!(constant("- 9223372036854775808"), i64::MIN);
        assert_eq!(constant("9223372036854775807"), i64::MAX);
        assert_eq!(constant("-9223372036854775807"), -i64::MAX);
        // Above i64::MAX: the same 64 bits as a negative value.
        assert_eq!(constant("9223372036854775808"), i64::MIN);
        assert_eq!(constant("18446744073709551615"), -1);
        assert_eq!(constant("0xFFFFFFFFFFFFFFFF"), -1);
        assert_eq!(constant("0xffffffffffffffff"), -1);
        assert_eq!(constant("0X8000000000000000"), i64::MIN);
        assert_eq!(constant("-0x8000000000000000"), i64::MIN);
        assert_eq!(constant("0x7fffffffffffffff"), i64::MAX);
        assert_eq!(constant("0x0000000000000000001"), 1, "leading zeros");
        assert_eq!(constant("-0"), 0);
        assert_eq!(constant("-5"), -5);
        // In a predicate, and with unary minus on other operands as before.
        assert_eq!(
            parse_expr("arg1 == -9223372036854775808").unwrap(),
            Expr::bin(BinOp::Eq, Expr::Arg(1), Expr::Const(i64::MIN))
        );
        assert_eq!(
            parse_expr("ret != 0xFFFFFFFFFFFFFFFF").unwrap(),
            Expr::bin(BinOp::Ne, Expr::Ret, Expr::Const(-1))
        );
        assert_eq!(
            parse_expr("-5 * 3").unwrap(),
            Expr::bin(BinOp::Mul, Expr::Const(-5), Expr::Const(3))
        );
        assert_eq!(
            parse_expr("-arg1").unwrap(),
            Expr::bin(BinOp::Sub, Expr::Const(0), Expr::Arg(1))
        );
        assert_eq!(
            parse_expr("--1").unwrap(),
            Expr::bin(BinOp::Sub, Expr::Const(0), Expr::Const(-1))
        );
        // Beyond 64 bits: refused, saying the range.
        for (text, shown) in [
            ("18446744073709551616", "'18446744073709551616'"),
            ("-9223372036854775809", "'-9223372036854775809'"),
            ("-18446744073709551615", "'-18446744073709551615'"),
            ("0x10000000000000000", "'0x10000000000000000'"),
            ("-0xFFFFFFFFFFFFFFFF", "'-0xFFFFFFFFFFFFFFFF'"),
            ("arg1 < 99999999999999999999", "'99999999999999999999'"),
        ] {
            let why = why(text);
            assert_eq!(
                why,
                format!(
                    "{shown} is out of range: integer constants are 64 bits, from \
                     -9223372036854775808 (i64::MIN) to 18446744073709551615 (u64::MAX, \
                     0xFFFFFFFFFFFFFFFF)"
                ),
                "{text}"
            );
        }
        // Not numbers at all.
        for text in ["0x", "0xg1", "12ab", "-0x", "1_000", "-12ab"] {
            assert!(
                why(text).contains("is not a number, argN, ret or tid"),
                "{text}"
            );
        }
        // The message as the command line shows it.
        let e = parse_expr("arg1 == 18446744073709551616").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("bad expression 'arg1 == 18446744073709551616': '18446744073709551616' is out of range"),
            "{e}"
        );
    }

    proptest::proptest! {
        /// Every i64 and every u64, written in decimal or hex, parses to
        /// its 64 bits.
        #[test]
        fn every_64_bit_constant_parses(v in proptest::prelude::any::<i64>()) {
            let bits = v as u64;
            for text in [v.to_string(), bits.to_string(), format!("{bits:#x}"), format!("{bits:#X}")] {
                proptest::prop_assert_eq!(parse_expr(&text).unwrap(), Expr::Const(v), "{}", text);
            }
        }

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
