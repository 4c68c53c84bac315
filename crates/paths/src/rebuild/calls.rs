//! An original instruction placed in a copy, and what a copy does around
//! its calls: where a call runs (in place, or by pushing the original
//! return address and jumping), the link sites it notes, the record its
//! return writes.

use super::splices::call_form_movable;
use super::{enc, is_call, link, AfterSyscall, Builder, Refusal};
use crate::record::Record;
use iced_x86::{Code, Instruction, MemoryOperand, Register};
use weft_code::RegSet;

impl Builder {
    /// An original instruction, re-encoded where it lands; a call whose
    /// return address is spliced becomes a jump to the original call (it
    /// runs in place) or, where a jump of weft's covers that,
    /// `push [literal]; jmp target`; its continuation gets a fake address,
    /// noted in `conts`.
    pub(super) fn instruction(
        &mut self,
        i: &Instruction,
        spliced: &[u64],
        conts: &mut Vec<(u64, u64)>,
    ) -> Result<(), Refusal> {
        let direct = link::call_target(i);
        let mut i = *i;
        if let Some((start, label)) = self.own_entry {
            if i.code() == Code::Call_rel32_64 && i.near_branch_target() == start {
                i.set_near_branch64(label);
            }
        }
        // The function's own address taken RIP-relative (`lea r, [f]`): the
        // encoder would point it at the copy, so the constant is written.
        if i.is_ip_rel_memory_operand() && self.range.contains(&i.ip_rel_memory_address()) {
            if i.code() != Code::Lea_r64_m {
                return Err(Refusal::NotRelocatable(i.ip(), "reads its own code"));
            }
            let mut mov = Instruction::with2(
                Code::Mov_r64_imm64,
                i.op0_register(),
                i.ip_rel_memory_address(),
            )
            .map_err(enc)?;
            mov.set_ip(i.ip());
            self.out.push(mov);
            return Ok(());
        }
        let i = &i;
        if i.code() == Code::Syscall {
            match self.after_syscall {
                AfterSyscall::Nothing => {}
                AfterSyscall::ForkChild { process, forked } => {
                    self.out.push(*i);
                    return self.clear_cursor_in_child(process, forked);
                }
                AfterSyscall::UnblockFaults => {
                    self.out.push(*i);
                    return self.unblock_faults();
                }
            }
        }
        let spliced_return = spliced.binary_search(&i.next_ip()).is_ok();
        let never_returns = call_form_movable(i) && self.no_return.contains(&i.ip());
        // The original call, where no jump of weft's covers it, runs in
        // place: the copy jumps to it, and its callee returns to the
        // original return address, whose jump leads back into the copy.
        // The return address on the stack is the original one (what
        // unwinders and debuggers look up) and the one the processor's
        // return predictor expects: a `push` of it and a `jmp` made every
        // callee's `ret` miss (sqlite3 on 500,000 rows, without stores:
        // 1.44 s, against 0.80 s with real calls).
        let in_place = is_call(i)
            && spliced_return
            && !never_returns
            && !self
                .occupied
                .iter()
                .any(|&(a, b)| a < i.next_ip() && b > i.ip());
        if in_place {
            let literal = self.literal(i.ip());
            let mut jmp = Instruction::with1(
                Code::Jmp_rm64,
                MemoryOperand::with_base_displ(Register::RIP, literal as i64),
            )
            .map_err(enc)?;
            jmp.set_ip(i.ip());
            self.out.push(jmp);
            let fake = self.fake();
            conts.push((i.next_ip(), fake));
            self.pending_fake = Some(fake);
            if let Some(target) = direct {
                let call = link::CallMark {
                    ip: i.ip(),
                    spliced_ret: Some(i.next_ip()),
                    record: None,
                    resumes: false,
                    in_place: true,
                };
                self.mark_branch(target, false, Some(call));
            }
            return Ok(());
        }
        if is_call(i) && (spliced_return || never_returns) {
            let literal = self.literal(i.next_ip());
            let mut push = Instruction::with1(
                Code::Push_rm64,
                MemoryOperand::with_base_displ(Register::RIP, literal as i64),
            )
            .map_err(enc)?;
            push.set_ip(i.ip());
            let mut jmp = *i;
            jmp.set_code(if i.code() == Code::Call_rel32_64 {
                Code::Jmp_rel32_64
            } else {
                Code::Jmp_rm64
            });
            jmp.set_ip(0);
            self.out.push(push);
            self.out.push(jmp);
            if spliced_return {
                let fake = self.fake();
                conts.push((i.next_ip(), fake));
                self.pending_fake = Some(fake);
            }
            self.mark_call(i, direct, spliced_return);
            return Ok(());
        }
        self.out.push(*i);
        self.mark_call(i, direct, false);
        Ok(())
    }

    /// Notes a direct call just placed as a link site.
    fn mark_call(&mut self, i: &Instruction, target: Option<u64>, spliced_return: bool) {
        if let Some(target) = target {
            let call = link::CallMark {
                ip: i.ip(),
                spliced_ret: spliced_return.then(|| i.next_ip()),
                record: None,
                resumes: false,
                in_place: false,
            };
            self.mark_branch(target, false, Some(call));
        }
    }

    /// The record a call's return writes, after it; noted with the call's
    /// link site.
    pub(super) fn store_returned(
        &mut self,
        call: &Instruction,
        record: Record,
        live: RegSet,
    ) -> Result<(), Refusal> {
        let first = self.out.len();
        self.store(record, live)?;
        let end = self.out.len();
        if let Some(c) = self
            .marks
            .last_mut()
            .and_then(|m| m.call.as_mut())
            .filter(|c| c.ip == call.ip())
        {
            c.record = (end > first).then_some((first, end));
            c.resumes = matches!(record, Record::Resumed(_));
        }
        Ok(())
    }
}
