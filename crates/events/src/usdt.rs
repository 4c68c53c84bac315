//! `--trace usdt:PROVIDER:NAME`: USDT probe sites become instruction points
//! whose event carries the probe's arguments, decoded from the operand
//! strings of `.note.stapsdt` (`-4@%edi`, `8@-16(%rbp)`, `4@$5`,
//! `8@8(%rax,%rdx,8)`). Probes with a semaphore have it raised while traced.

use crate::{Error, Result};
use weft_image::glob_match;
use weft_live::Module;
use weft_plan::{Action, Expr, PointSpec, Strings};
use weft_process::RemoteAddr;

const REGS: [&str; 16] = [
    "ax", "cx", "dx", "bx", "sp", "bp", "si", "di", "8", "9", "10", "11", "12", "13", "14", "15",
];

/// The register number of an AT&T register name (any width), and its width in bytes.
fn register(name: &str) -> Option<(u8, u8)> {
    let n = name.strip_prefix('%')?;
    if let Some(rest) = n.strip_prefix('r') {
        // r8..r15 with d/w/b suffixes, or rax..rdi
        let (digits, suffix) = rest.split_at(
            rest.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len()),
        );
        if !digits.is_empty() {
            let size = match suffix {
                "" => 8,
                "d" => 4,
                "w" => 2,
                "b" => 1,
                _ => return None,
            };
            return REGS
                .iter()
                .position(|r| *r == digits)
                .map(|i| (i as u8, size));
        }
        return REGS.iter().position(|r| *r == rest).map(|i| (i as u8, 8));
    }
    if let Some(rest) = n.strip_prefix('e') {
        return REGS.iter().position(|r| *r == rest).map(|i| (i as u8, 4));
    }
    let byte = ["al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil"];
    if let Some(i) = byte.iter().position(|r| *r == n) {
        return Some((i as u8, 1));
    }
    REGS.iter().position(|r| *r == n).map(|i| (i as u8, 2))
}

/// Decodes one USDT argument (`SIZE@OPERAND`) into an expression.
/// `symbol` gives the runtime address of a symbol of the probe's module, for
/// operands such as `counter(%rip)` or `8+table(%rip)`.
pub fn operand(size: i8, text: &str, symbol: &dyn Fn(&str) -> Option<u64>) -> Result<Expr> {
    let bad = || {
        Error::BadRequest(format!(
            "USDT operand '{size}@{text}' is not one weft decodes"
        ))
    };
    let bytes = size.unsigned_abs().clamp(1, 8);
    let signed = size < 0;
    if let Some(imm) = text.strip_prefix('$') {
        let v = imm
            .strip_prefix("0x")
            .map_or_else(|| imm.parse::<i64>(), |h| i64::from_str_radix(h, 16));
        return v.map(Expr::Const).map_err(|_| bad());
    }
    if text.starts_with('%') {
        let (r, _) = register(text).ok_or_else(bad)?;
        return Ok(Expr::Narrow(Box::new(Expr::Reg(r)), bytes, signed));
    }
    // disp(base,index,scale)
    let open = text.find('(').ok_or_else(bad)?;
    let disp_text = &text[..open];
    let inner = text[open + 1..].strip_suffix(')').ok_or_else(bad)?;
    if inner == "%rip" {
        let address = symbol_sum(disp_text, symbol).ok_or_else(|| {
            Error::BadRequest(format!(
                "USDT operand '{size}@{text}' names a symbol the module's symbol tables do not hold"
            ))
        })?;
        return Ok(Expr::Load {
            base: None,
            index: None,
            disp: address as i64,
            size: bytes,
            signed,
        });
    }
    let disp = if disp_text.is_empty() {
        0
    } else {
        disp_text
            .strip_prefix("-0x")
            .map(|h| i64::from_str_radix(h, 16).map(|v| -v))
            .or_else(|| {
                disp_text
                    .strip_prefix("0x")
                    .map(|h| i64::from_str_radix(h, 16))
            })
            .unwrap_or_else(|| disp_text.parse())
            .map_err(|_| bad())?
    };
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let base = match parts.first() {
        Some(b) if !b.is_empty() => Some(register(b).ok_or_else(bad)?.0),
        _ => None,
    };
    let index = match (parts.get(1), parts.get(2)) {
        (Some(i), scale) if !i.is_empty() => Some((
            register(i).ok_or_else(bad)?.0,
            scale
                .map_or(Ok(1), |s| s.parse::<u8>())
                .map_err(|_| bad())?,
        )),
        _ => None,
    };
    Ok(Expr::Load {
        base,
        index,
        disp,
        size: bytes,
        signed,
    })
}

/// The address `SYMBOL`, `SYMBOL+N`, `N+SYMBOL` or `SYMBOL-N` stands for:
/// exactly one symbol and any number of decimal or hex offsets.
fn symbol_sum(text: &str, symbol: &dyn Fn(&str) -> Option<u64>) -> Option<u64> {
    let mut total: i64 = 0;
    let mut symbols = 0;
    let mut rest = text;
    let mut negative = false;
    while !rest.is_empty() {
        // A term ends at the next sign that is not its first character.
        let end = rest
            .get(1..)?
            .find(['+', '-'])
            .map_or(rest.len(), |i| i + 1);
        let term = &rest[..end];
        let number = term.strip_prefix("0x").map_or_else(
            || term.parse::<i64>().ok(),
            |h| i64::from_str_radix(h, 16).ok(),
        );
        let value = match number {
            Some(n) => n,
            None => {
                symbols += 1;
                symbol(term)? as i64
            }
        };
        total = if negative {
            total.wrapping_sub(value)
        } else {
            total.wrapping_add(value)
        };
        negative = rest[end..].starts_with('-');
        rest = rest.get(end + 1..).unwrap_or("");
    }
    (symbols == 1).then_some(total as u64)
}

/// Probes matching `PROVIDER:NAME` (globs) in `modules` (the process's,
/// as the applier found them): the point specs, and the semaphores
/// (runtime addresses) to raise.
/// `PROVIDER:NAME@arg1/s,...` records those arguments as strings, at most
/// `string_max` bytes of each.
pub fn usdt_specs(
    modules: &[std::sync::Arc<Module>],
    request: &str,
    string_max: u16,
) -> Result<(Vec<PointSpec>, Vec<RemoteAddr>)> {
    let (what, mask, _) = crate::split_string_args(request)?;
    let strings = Strings {
        mask,
        cap: string_max,
        sized: 0,
        gathered: 0,
    };
    let (provider, name) = what
        .split_once(':')
        .ok_or_else(|| Error::BadRequest(format!("'usdt:{what}': write usdt:PROVIDER:NAME")))?;
    let mut specs = Vec::new();
    let mut semaphores = Vec::new();
    let mut near = Vec::new();
    for m in modules {
        for p in m.image.usdt_probes() {
            near.push(format!("{}:{}", p.provider, p.name));
            if !glob_match(provider, &p.provider) || !glob_match(name, &p.name) {
                continue;
            }
            let Some(f) = m.image.function_at(p.pc) else {
                continue;
            };
            let args = p
                .args
                .iter()
                .map(|(size, op)| {
                    operand(*size, op, &|s| {
                        m.image.symbol_address(s).map(|a| m.runtime(a).get())
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let point = format!("{}:{}+{:#x}", m.name, f.name, p.pc - f.addr);
            if let Some(n) = (0..16).rev().find(|i| mask & (1 << i) != 0) {
                if n >= args.len() {
                    return Err(Error::BadRequest(format!(
                        "'usdt:{request}': {}:{} has {} arguments, not {}",
                        p.provider,
                        p.name,
                        args.len(),
                        n + 1
                    )));
                }
            }
            let action = Action::Expand(std::sync::Arc::new(crate::ProbeEvent {
                name: format!("{}:{}", p.provider, p.name),
                args,
                strings,
            }));
            specs.push(PointSpec::parse(&point)?.with_action(action));
            if let Some(s) = p.semaphore {
                semaphores.push(m.runtime(s));
            }
        }
    }
    if specs.is_empty() {
        near.sort();
        near.dedup();
        let hint = weft_image::near_misses(what, near.iter().map(String::as_str), 5);
        let modules: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        let searched = match modules.len() {
            0..=6 => modules.join(", "),
            n => format!("{}, and {} more", modules[..5].join(", "), n - 5),
        };
        return Err(Error::NoUsdtProbe(format!(
            "'usdt:{what}' matches no USDT probe in the loaded modules ({searched}){}",
            if hint.is_empty() {
                String::new()
            } else {
                format!("; did you mean: {}?", hint.join(", "))
            }
        )));
    }
    Ok((specs, semaphores))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_symbols(_: &str) -> Option<u64> {
        None
    }

    #[test]
    fn decodes_the_operands_debian_binaries_use() {
        assert_eq!(
            operand(8, "%rbp", &no_symbols).unwrap(),
            Expr::Narrow(Box::new(Expr::Reg(5)), 8, false)
        );
        assert_eq!(
            operand(-4, "%eax", &no_symbols).unwrap(),
            Expr::Narrow(Box::new(Expr::Reg(0)), 4, true)
        );
        assert_eq!(
            operand(8, "%r12", &no_symbols).unwrap(),
            Expr::Narrow(Box::new(Expr::Reg(12)), 8, false)
        );
        assert_eq!(
            operand(-4, "%r9d", &no_symbols).unwrap(),
            Expr::Narrow(Box::new(Expr::Reg(9)), 4, true)
        );
        assert_eq!(
            operand(-4, "112(%rsp)", &no_symbols).unwrap(),
            Expr::Load {
                base: Some(4),
                index: None,
                disp: 112,
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            operand(8, "-80(%rbx)", &no_symbols).unwrap(),
            Expr::Load {
                base: Some(3),
                index: None,
                disp: -80,
                size: 8,
                signed: false
            }
        );
        assert_eq!(
            operand(8, "8(%rax,%rdx,8)", &no_symbols).unwrap(),
            Expr::Load {
                base: Some(0),
                index: Some((2, 8)),
                disp: 8,
                size: 8,
                signed: false
            }
        );
        assert_eq!(operand(4, "$5", &no_symbols).unwrap(), Expr::Const(5));
        assert!(operand(8, "sym(%rip)", &no_symbols).is_err());
    }

    #[test]
    fn rip_relative_operands_are_symbol_addresses() {
        let symbols = |name: &str| match name {
            "gcount" => Some(0x5000),
            "gp" => Some(0x6000),
            _ => None,
        };
        let at = |disp, size, signed| Expr::Load {
            base: None,
            index: None,
            disp,
            size,
            signed,
        };
        assert_eq!(
            operand(-8, "gcount(%rip)", &symbols).unwrap(),
            at(0x5000, 8, true)
        );
        assert_eq!(
            operand(-8, "8+gp(%rip)", &symbols).unwrap(),
            at(0x6008, 8, true)
        );
        assert_eq!(
            operand(4, "gp+0x10(%rip)", &symbols).unwrap(),
            at(0x6010, 4, false)
        );
        assert_eq!(
            operand(2, "gp-2(%rip)", &symbols).unwrap(),
            at(0x5ffe, 2, false)
        );
        for unknown in ["missing(%rip)", "16(%rip)", "gp+gcount(%rip)"] {
            assert!(operand(8, unknown, &symbols).is_err(), "{unknown}");
        }
    }
}
