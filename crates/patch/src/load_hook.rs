//! The library-load hook: code spliced at the dynamic loader's
//! `_dl_debug_state` (the `r_brk` hook of `r_debug`, which ld.so calls after
//! mapping a library and before running its constructors or returning from
//! `dlopen`). It tells weft a library appeared and waits until weft has
//! instrumented it, so no call into the new library goes uncounted.
//!
//! Protocol on 32-bit words of the sync page (`region::sync`):
//! the hook increments `generation` and wakes weft (`FUTEX_WAKE`), then
//! waits (`FUTEX_WAIT`, 2 s at a time) until `ack` reaches its generation.
//! weft sets `ack` after instrumenting, and wakes the waiters. A wait that
//! times out twice gives up, so a target whose weft died is delayed at most
//! 4 s per library and never blocked for good (ARCHITECTURE decision 5).
//! The hook saves every register it touches; it runs once per `dlopen`.
//! It skips the handshake when `listening` is 0 (weft has detached; a
//! forked child may still carry the hook).

use crate::{Error, Result, RED_ZONE};
use iced_x86::code_asm::*;
use weft_abi::{errno, futex, syscall};

pub use crate::region::sync::{ACK, GENERATION, LISTENING};

/// Hook code at `at`: handshake on the sync words at `sync`, then jump to
/// `continuation` (a trampoline running the displaced instructions).
pub fn hook_code(at: u64, sync: u64, continuation: u64) -> Result<Vec<u8>> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut wait = a.create_label();
    let mut done = a.create_label();
    let mut sync_lit = a.create_label();
    let mut timeout = a.create_label();
    let saved = [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11];
    (|| -> std::result::Result<(), IcedError> {
        a.lea(rsp, qword_ptr(rsp - RED_ZONE as i32))?;
        a.pushfq()?;
        for r in saved {
            a.push(r)?;
        }
        a.mov(r8, qword_ptr(sync_lit))?;
        a.cmp(dword_ptr(r8 + LISTENING as i32), 0)?;
        a.je(done)?;
        a.mov(r9d, 1)?;
        a.lock().xadd(dword_ptr(r8 + GENERATION as i32), r9d)?;
        a.add(r9d, 1)?; // this call's generation
        a.mov(eax, syscall::FUTEX)?; // futex(&generation, FUTEX_WAKE, 1)
        a.lea(rdi, qword_ptr(r8 + GENERATION as i32))?;
        a.mov(esi, futex::WAKE as u32)?;
        a.mov(edx, 1)?;
        a.syscall()?;
        a.mov(r11d, 2)?; // timeouts left
        a.set_label(&mut wait)?;
        a.mov(eax, dword_ptr(r8 + ACK as i32))?;
        a.mov(ecx, r9d)?;
        a.sub(ecx, eax)?;
        a.jle(done)?; // ack >= generation (wrapping difference)
        a.mov(edx, eax)?; // futex(&ack, FUTEX_WAIT, ack, &timeout)
        a.mov(eax, syscall::FUTEX)?;
        a.lea(rdi, qword_ptr(r8 + ACK as i32))?;
        a.mov(esi, futex::WAIT as u32)?;
        a.lea(r10, qword_ptr(timeout))?;
        a.push(r11)?;
        a.syscall()?; // clobbers rcx and r11
        a.pop(r11)?;
        a.cmp(rax, -errno::ETIMEDOUT)?;
        a.jne(wait)?;
        a.sub(r11d, 1)?;
        a.jnz(wait)?;
        a.set_label(&mut done)?;
        for r in saved.iter().rev() {
            a.pop(*r)?;
        }
        a.popfq()?;
        a.lea(rsp, qword_ptr(rsp + RED_ZONE as i32))?;
        a.jmp(continuation)?;
        a.set_label(&mut timeout)?;
        a.dq(&[2, 0])?;
        a.set_label(&mut sync_lit)?;
        a.dq(&[sync])?;
        Ok(())
    })()
    .map_err(enc)?;
    a.assemble(at).map_err(enc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_code::{decode_all, format_instruction};

    #[test]
    fn hook_saves_what_it_uses_and_continues() {
        let code = hook_code(0x10_0000, 0x20_0000, 0x10_8000).unwrap();
        assert_eq!(
            u64::from_le_bytes(code[code.len() - 8..].try_into().unwrap()),
            0x20_0000
        );
        let insns = decode_all(0x10_0000, &code);
        let text: Vec<String> = insns.iter().map(format_instruction).collect();
        assert!(
            text[0].starts_with("lea") && text[0].contains("-0x80(%rsp)"),
            "{text:?}"
        );
        let pushes = text.iter().filter(|t| t.starts_with("push")).count();
        let pops = text.iter().filter(|t| t.starts_with("pop")).count();
        assert_eq!(pushes, pops, "{text:?}");
        assert!(insns.iter().any(|i| i.near_branch_target() == 0x10_8000));
        assert_eq!(text.iter().filter(|t| t.as_str() == "syscall").count(), 2);
    }
}
