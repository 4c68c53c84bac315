//! Points: which functions, and where in each, a probe goes.

use crate::{Action, Result};
use weft_image::Pattern;

/// Where in a function a probe goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PointKind {
    /// The function's entry (after an `endbr64`).
    Entry,
    /// Every exit: each `ret` and each tail-call jump.
    Exit,
    /// One instruction, by byte offset from the function's start.
    Instruction(u64),
    /// Every `syscall` instruction of the function, before the kernel
    /// runs it (a function without one has no point).
    Syscall,
    /// The instruction after every `syscall` of the function: the call's
    /// return, with its result in `rax`.
    AfterSyscall,
}

/// A request: a function pattern, where in those functions, and what runs there.
#[derive(Debug, Clone)]
pub struct PointSpec {
    /// Which functions.
    pub pattern: Pattern,
    /// Which point in each.
    pub kind: PointKind,
    /// What runs there.
    pub action: Action,
    /// A label shared by the probes of one request, for removing them together.
    pub tag: u64,
}

impl PointSpec {
    /// `[MODULE:]FUNCTION` (entry) or `[MODULE:]FUNCTION+OFFSET` (instruction), counted.
    pub fn parse(text: &str) -> Result<PointSpec> {
        let pattern = Pattern::parse(text)?;
        let kind = pattern
            .offset
            .map_or(PointKind::Entry, PointKind::Instruction);
        Ok(PointSpec {
            pattern,
            kind,
            action: Action::Count,
            tag: 0,
        })
    }

    /// The exits of `[MODULE:]FUNCTION`, counted.
    pub fn exits(text: &str) -> Result<PointSpec> {
        let pattern = Pattern::parse(text)?;
        if pattern.offset.is_some() {
            return Err(weft_image::Error::BadPattern(
                text.into(),
                "an exit pattern takes no +OFFSET",
            )
            .into());
        }
        Ok(PointSpec {
            pattern,
            kind: PointKind::Exit,
            action: Action::Count,
            tag: 0,
        })
    }

    /// The same points with a tag (the applier removes a tag's probes together).
    pub fn with_tag(mut self, tag: u64) -> PointSpec {
        self.tag = tag;
        self
    }

    /// The same points running `action` instead.
    pub fn with_action(mut self, action: Action) -> PointSpec {
        self.action = action;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse() {
        let entry = PointSpec::parse("libc:malloc").unwrap();
        assert_eq!(entry.kind, PointKind::Entry);
        assert_eq!(entry.pattern.module.as_deref(), Some("libc"));
        let insn = PointSpec::parse("work+0x1c").unwrap();
        assert_eq!(insn.kind, PointKind::Instruction(0x1c));
        assert_eq!(PointSpec::exits("work").unwrap().kind, PointKind::Exit);
        assert!(PointSpec::exits("work+4").is_err());
        assert_eq!(PointSpec::parse("f").unwrap().with_tag(7).tag, 7);
    }
}
