//! Expressions and predicates as straight-line integer code: constants,
//! arguments, the return value, registers, memory loads, process-wide and
//! per-thread counters, the thread's id, and `+ - * / < > <= >= == != and
//! or`. A division by zero yields 0. The result is in rax; rcx (and rdx
//! for a division) are clobbered; r8-r11 survive.

use super::{Gen, ARG_OFFSET, FIXED_FRAME_RSP, MADE_NUMBER, MADE_TIME, RAX_OFFSET};
use crate::region::threads as t;
use iced_x86::code_asm::*;
use weft_plan::{BinOp, Expr};

impl Gen {
    /// rax := e. `depth` temporaries are on the stack above the saves.
    pub(super) fn expr(&mut self, e: &Expr, depth: i32) -> std::result::Result<(), IcedError> {
        match e {
            Expr::Const(c) => self.a.mov(rax, *c)?,
            Expr::Arg(n) => {
                let off = ARG_OFFSET[(*n as usize).clamp(1, 6) - 1] + depth * 8;
                self.a.mov(rax, qword_ptr(rsp + off))?
            }
            Expr::Ret => self.a.mov(rax, qword_ptr(rsp + RAX_OFFSET + depth * 8))?,
            Expr::Counter(addr) => {
                // The sum of its lanes.
                let l = self.literal(*addr);
                self.a.mov(rcx, qword_ptr(l))?;
                self.a.mov(rax, qword_ptr(rcx))?;
                let lanes = self.table.lanes;
                for lane in 1..lanes.count {
                    self.a
                        .add(rax, qword_ptr(rcx + (lane * lanes.stride) as i32))?;
                }
            }
            Expr::ThreadCounter(n) => self.a.mov(rax, qword_ptr(r11 + t::counter(*n) as i32))?,
            Expr::Tid => self.a.mov(rax, qword_ptr(r11 + t::TID as i32))?,
            Expr::ThreadTimer(n) => self
                .a
                .mov(rax, qword_ptr(r11 + (t::timer(*n) + t::TIMER_TOTAL) as i32))?,
            Expr::Reg(n) => self.reg_value(*n, depth)?,
            Expr::MadeCallNumber | Expr::MadeCallTime => self.leaf_into(e, rax, depth)?,
            Expr::Load {
                base,
                index,
                disp,
                size,
                signed,
            } => {
                // rax := address, then load through it.
                match base {
                    Some(b) => self.reg_value(*b, depth)?,
                    None => self.a.xor(eax, eax)?,
                }
                if let Some((i, scale)) = index {
                    self.a.push(rax)?;
                    self.reg_value(*i, depth + 1)?;
                    self.a.imul_3(rax, rax, *scale as i32)?;
                    self.a.pop(rcx)?;
                    self.a.add(rax, rcx)?;
                }
                self.a.mov(rcx, *disp)?;
                self.a.add(rax, rcx)?;
                match (size, signed) {
                    (1, true) => self.a.movsx(rax, byte_ptr(rax))?,
                    (1, false) => self.a.movzx(eax, byte_ptr(rax))?,
                    (2, true) => self.a.movsx(rax, word_ptr(rax))?,
                    (2, false) => self.a.movzx(eax, word_ptr(rax))?,
                    (4, true) => self.a.movsxd(rax, dword_ptr(rax))?,
                    (4, false) => self.a.mov(eax, dword_ptr(rax))?,
                    _ => self.a.mov(rax, qword_ptr(rax))?,
                }
            }
            Expr::Narrow(e, size, signed) => {
                self.expr(e, depth)?;
                match (size, signed) {
                    (1, true) => self.a.movsx(rax, al)?,
                    (1, false) => self.a.movzx(eax, al)?,
                    (2, true) => self.a.movsx(rax, ax)?,
                    (2, false) => self.a.movzx(eax, ax)?,
                    (4, true) => self.a.movsxd(rax, eax)?,
                    (4, false) => self.a.mov(eax, eax)?,
                    _ => {}
                }
            }
            Expr::Bin(op, l, r) => {
                if is_leaf(r) {
                    // No temporary on the stack: r read straight into rcx
                    // once l is in rax.
                    self.expr(l, depth)?;
                    self.leaf_into(r, rcx, depth)?;
                } else {
                    self.expr(r, depth)?;
                    self.a.push(rax)?;
                    self.expr(l, depth + 1)?;
                    self.a.pop(rcx)?;
                }
                self.op(*op)?;
            }
        }
        Ok(())
    }

    /// `to` := e, for an `e` that [`is_leaf`] accepts; other registers
    /// are kept.
    fn leaf_into(
        &mut self,
        e: &Expr,
        to: AsmRegister64,
        depth: i32,
    ) -> std::result::Result<(), IcedError> {
        match e {
            Expr::Const(c) => self.a.mov(to, *c)?,
            Expr::Arg(n) => {
                let off = ARG_OFFSET[(*n as usize).clamp(1, 6) - 1] + depth * 8;
                self.a.mov(to, qword_ptr(rsp + off))?
            }
            Expr::Ret => self.a.mov(to, qword_ptr(rsp + RAX_OFFSET + depth * 8))?,
            Expr::ThreadCounter(n) => self.a.mov(to, qword_ptr(r11 + t::counter(*n) as i32))?,
            Expr::Tid => self.a.mov(to, qword_ptr(r11 + t::TID as i32))?,
            Expr::ThreadTimer(n) => self
                .a
                .mov(to, qword_ptr(r11 + (t::timer(*n) + t::TIMER_TOTAL) as i32))?,
            Expr::Reg(n) => self.reg_into(*n, to, depth)?,
            Expr::MadeCallNumber => self.a.mov(to, qword_ptr(rsp + MADE_NUMBER + depth * 8))?,
            Expr::MadeCallTime => self.a.mov(to, qword_ptr(rsp + MADE_TIME + depth * 8))?,
            _ => unreachable!("leaf_into called for a value that is not a leaf"),
        }
        Ok(())
    }

    /// Jumps to `skip` unless predicate `p` holds (is not 0): a comparison
    /// is one `cmp` and a conditional jump, an `and` tests its sides in
    /// turn (predicates have no side effects, so skipping the second
    /// changes nothing but the time). rax, rcx (rdx for a division) are
    /// clobbered.
    pub(super) fn branch_unless(
        &mut self,
        p: &Expr,
        skip: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        match p {
            Expr::Bin(BinOp::And, l, r) => {
                self.branch_unless(l, skip)?;
                self.branch_unless(r, skip)
            }
            Expr::Bin(
                op @ (BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge | BinOp::Eq | BinOp::Ne),
                l,
                r,
            ) => {
                self.expr(l, 0)?;
                match **r {
                    Expr::Const(c) if i32::try_from(c).is_ok() => self.a.cmp(rax, c as i32)?,
                    _ if is_leaf(r) => {
                        self.leaf_into(r, rcx, 0)?;
                        self.a.cmp(rax, rcx)?
                    }
                    _ => {
                        self.a.push(rax)?;
                        self.expr(r, 1)?;
                        self.a.mov(rcx, rax)?;
                        self.a.pop(rax)?;
                        self.a.cmp(rax, rcx)?
                    }
                }
                // Jump when the comparison fails.
                match op {
                    BinOp::Lt => self.a.jge(skip),
                    BinOp::Gt => self.a.jle(skip),
                    BinOp::Le => self.a.jg(skip),
                    BinOp::Ge => self.a.jl(skip),
                    BinOp::Eq => self.a.jne(skip),
                    _ => self.a.je(skip),
                }
            }
            _ => {
                self.expr(p, 0)?;
                self.a.test(rax, rax)?;
                self.a.jz(skip)
            }
        }
    }

    /// rax := the value register `n` had at the point.
    fn reg_value(&mut self, n: u8, depth: i32) -> std::result::Result<(), IcedError> {
        self.reg_into(n, rax, depth)
    }

    /// `to` := the value register `n` had at the point.
    fn reg_into(
        &mut self,
        n: u8,
        to: AsmRegister64,
        depth: i32,
    ) -> std::result::Result<(), IcedError> {
        // Saved caller-saved registers, in push order rax..r11 (r11 last, at rsp).
        let saved = |n: u8| -> Option<i32> {
            [
                (0u8, 64),
                (1, 56),
                (2, 48),
                (6, 40),
                (7, 32),
                (8, 24),
                (9, 16),
                (10, 8),
                (11, 0),
            ]
            .iter()
            .find(|(r, _)| *r == n)
            .map(|(_, off)| *off)
        };
        match n {
            4 => self
                .a
                .lea(to, qword_ptr(rsp + FIXED_FRAME_RSP + depth * 8))?,
            n if saved(n).is_some() => self
                .a
                .mov(to, qword_ptr(rsp + saved(n).unwrap_or(0) + depth * 8))?,
            3 => self.a.mov(to, rbx)?,
            5 => self.a.mov(to, rbp)?,
            12 => self.a.mov(to, r12)?,
            13 => self.a.mov(to, r13)?,
            14 => self.a.mov(to, r14)?,
            _ => self.a.mov(to, r15)?,
        }
        Ok(())
    }

    /// rax := rax op rcx.
    fn op(&mut self, op: BinOp) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        match op {
            BinOp::Add => a.add(rax, rcx)?,
            BinOp::Sub => a.sub(rax, rcx)?,
            BinOp::Mul => a.imul_2(rax, rcx)?,
            BinOp::Div => {
                let mut zero = a.create_label();
                let mut negate = a.create_label();
                let mut done = a.create_label();
                a.test(rcx, rcx)?;
                a.jz(zero)?;
                a.cmp(rcx, -1)?;
                a.je(negate)?; // avoids the overflow fault of i64::MIN / -1
                a.cqo()?;
                a.idiv(rcx)?;
                a.jmp(done)?;
                a.set_label(&mut negate)?;
                a.neg(rax)?;
                a.jmp(done)?;
                a.set_label(&mut zero)?;
                a.xor(eax, eax)?;
                a.set_label(&mut done)?;
            }
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                a.cmp(rax, rcx)?;
                match op {
                    BinOp::Lt => a.setl(al)?,
                    BinOp::Gt => a.setg(al)?,
                    BinOp::Le => a.setle(al)?,
                    BinOp::Ge => a.setge(al)?,
                    BinOp::Eq => a.sete(al)?,
                    _ => a.setne(al)?,
                }
                a.movzx(eax, al)?;
            }
            BinOp::And | BinOp::Or => {
                a.test(rax, rax)?;
                a.setne(al)?;
                a.test(rcx, rcx)?;
                a.setne(cl)?;
                if op == BinOp::And {
                    a.and(al, cl)?;
                } else {
                    a.or(al, cl)?;
                }
                a.movzx(eax, al)?;
            }
        }
        Ok(())
    }
}

/// Whether `e` is read with one instruction that needs no register but
/// its destination ([`Gen::leaf_into`]).
fn is_leaf(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Const(_)
            | Expr::Arg(_)
            | Expr::Ret
            | Expr::ThreadCounter(_)
            | Expr::Tid
            | Expr::ThreadTimer(_)
            | Expr::Reg(_)
            | Expr::MadeCallNumber
            | Expr::MadeCallTime
    )
}
