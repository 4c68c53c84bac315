//! Sets of general-purpose registers and status flags.

use iced_x86::Register;

/// Bit for RFLAGS.OF in a [`RegSet`].
pub const FLAG_OF: u32 = 1 << 16;
/// Bit for RFLAGS.SF.
pub const FLAG_SF: u32 = 1 << 17;
/// Bit for RFLAGS.ZF.
pub const FLAG_ZF: u32 = 1 << 18;
/// Bit for RFLAGS.AF.
pub const FLAG_AF: u32 = 1 << 19;
/// Bit for RFLAGS.CF.
pub const FLAG_CF: u32 = 1 << 20;
/// Bit for RFLAGS.PF.
pub const FLAG_PF: u32 = 1 << 21;
/// All six status flags.
pub const STATUS_FLAGS: u32 = FLAG_OF | FLAG_SF | FLAG_ZF | FLAG_AF | FLAG_CF | FLAG_PF;

const GPR_NAMES: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

/// A set of the 16 general-purpose registers (bits 0-15, in encoding
/// order: rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8-r15) and the six
/// status flags (bits 16-21). Vector registers are not tracked: weft's
/// snippets never touch them.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RegSet(pub u32);

impl RegSet {
    /// The empty set.
    pub const EMPTY: RegSet = RegSet(0);
    /// Every register and flag.
    pub const ALL: RegSet = RegSet(0xffff | STATUS_FLAGS);

    /// The set holding the 64-bit register that `reg` is part of, if it is a GPR.
    pub fn of(reg: Register) -> RegSet {
        gpr_index(reg).map_or(RegSet::EMPTY, |i| RegSet(1 << i))
    }

    /// Sets from a list of registers.
    pub fn of_all(regs: &[Register]) -> RegSet {
        regs.iter().fold(RegSet::EMPTY, |s, &r| s | RegSet::of(r))
    }

    /// Whether `reg`'s full register is in the set.
    pub fn contains(self, reg: Register) -> bool {
        !(self & RegSet::of(reg)).is_empty() || (gpr_index(reg).is_none())
    }

    /// Whether any of the given flag bits is in the set.
    pub fn flags_live(self, flags: u32) -> bool {
        self.0 & flags != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Converts iced RFLAGS bits (OF SF ZF AF CF PF) to set bits.
    pub fn from_rflags(bits: u32) -> RegSet {
        use iced_x86::RflagsBits as R;
        let mut s = 0;
        for (r, f) in [
            (R::OF, FLAG_OF),
            (R::SF, FLAG_SF),
            (R::ZF, FLAG_ZF),
            (R::AF, FLAG_AF),
            (R::CF, FLAG_CF),
            (R::PF, FLAG_PF),
        ] {
            if bits & r != 0 {
                s |= f;
            }
        }
        RegSet(s)
    }
}

/// Index 0-15 of the 64-bit GPR containing `reg`.
pub(crate) fn gpr_index(reg: Register) -> Option<u32> {
    if !reg.is_gpr() {
        return None;
    }
    let full = reg.full_register();
    let n = full as u32;
    let base = Register::RAX as u32;
    (base..base + 16).contains(&n).then(|| n - base)
}

impl std::ops::BitOr for RegSet {
    type Output = RegSet;
    fn bitor(self, o: RegSet) -> RegSet {
        RegSet(self.0 | o.0)
    }
}
impl std::ops::BitAnd for RegSet {
    type Output = RegSet;
    fn bitand(self, o: RegSet) -> RegSet {
        RegSet(self.0 & o.0)
    }
}
impl std::ops::Sub for RegSet {
    type Output = RegSet;
    fn sub(self, o: RegSet) -> RegSet {
        RegSet(self.0 & !o.0)
    }
}

impl std::fmt::Debug for RegSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl std::fmt::Display for RegSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<&str> = (0..16)
            .filter(|i| self.0 & (1 << i) != 0)
            .map(|i| GPR_NAMES[i])
            .collect();
        for (bit, name) in [
            (FLAG_OF, "OF"),
            (FLAG_SF, "SF"),
            (FLAG_ZF, "ZF"),
            (FLAG_AF, "AF"),
            (FLAG_CF, "CF"),
            (FLAG_PF, "PF"),
        ] {
            if self.0 & bit != 0 {
                parts.push(name);
            }
        }
        if parts.is_empty() {
            write!(f, "(none)")
        } else {
            write!(f, "{}", parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_registers_map_to_full() {
        assert_eq!(RegSet::of(Register::AL), RegSet::of(Register::RAX));
        assert_eq!(RegSet::of(Register::R9D), RegSet(1 << 9));
        assert!(RegSet::of(Register::XMM0).is_empty());
        assert_eq!(
            format!(
                "{}",
                RegSet::of_all(&[Register::RDI, Register::R12]) | RegSet(FLAG_ZF)
            ),
            "rdi r12 ZF"
        );
    }
}
