//! Where the kernel puts a signal frame on x86-64, so that generated code
//! can find the frame of a signal that took a thread out of a system call
//! after the handler has left it (`mini::open_calls`): the interrupted
//! context's `rax` is the call's result.
//!
//! Linux (`arch/x86/kernel/signal.c`, `get_sigframe`) puts the frame below
//! the interrupted `rsp`: 128 bytes of red zone, then the extended FPU
//! state (`xsave` area and its trailing magic word), aligned down to 64,
//! then `struct rt_sigframe` (440 bytes), aligned down to 16 and 8 below
//! that. The FPU state's size depends on the CPU and on the kernel's
//! configuration, so weft measures it once from a signal of its own: the
//! kernel writes it into the frame (`_fpx_sw_bytes.extended_size`), and
//! the same signal checks the whole computation against where the frame
//! really is. A machine where that check fails gets no such code.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// `sizeof(struct rt_sigframe)` on x86-64: return address, `ucontext_t`
/// (flags, link, stack, `sigcontext`, mask), `siginfo_t`.
const RT_SIGFRAME: u64 = 440;
/// Bytes the kernel leaves below `rsp` for the interrupted code.
const RED_ZONE: u64 = 128;
/// `_fpx_sw_bytes` in the `fxsave` area, and its `magic1`.
const SW_BYTES: usize = 464;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;

/// Offsets in the frame (from its start, the return address) of the
/// interrupted `rax`, `rsp`, `rip`, and of the pointer to the FPU state.
pub const RAX: u64 = 152;
pub const RSP: u64 = 168;
pub const RIP: u64 = 176;
pub const FPSTATE: u64 = 232;

/// The frame's place for a signal that interrupted code whose `rsp` was
/// `rsp`, given the FPU state's size: (the frame, the FPU state).
pub fn frame_for(rsp: u64, fpu_size: u64) -> (u64, u64) {
    let fpstate = (rsp - RED_ZONE - fpu_size) & !63;
    let frame = ((fpstate - RT_SIGFRAME) & !15) - 8;
    (frame, fpstate)
}

/// The FPU state's size in this machine's signal frames (what
/// [`frame_for`] takes), if a signal here agreed with the computation.
pub fn fpu_size() -> Option<u64> {
    static SIZE: OnceLock<Option<u64>> = OnceLock::new();
    *SIZE.get_or_init(measure)
}

/// What the measuring signal's handler found: the size, 0 for none.
static MEASURED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_: libc::c_int, _: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid `ucontext_t` to an SA_SIGINFO
    // handler; its `fpregs` points at the FPU state in the same frame (or
    // is null), whose first 512 bytes are the `fxsave` area, which holds
    // `_fpx_sw_bytes` at byte 464 when an extended state follows.
    unsafe {
        let context = context as *const libc::ucontext_t;
        let fpstate = (*context).uc_mcontext.fpregs as *const u8;
        if fpstate.is_null() {
            return;
        }
        let magic = std::ptr::read_unaligned(fpstate.add(SW_BYTES) as *const u32);
        if magic != FP_XSTATE_MAGIC1 {
            return;
        }
        let size = std::ptr::read_unaligned(fpstate.add(SW_BYTES + 4) as *const u32);
        let rsp = (*context).uc_mcontext.gregs[libc::REG_RSP as usize] as u64;
        let frame = context as u64 - 8;
        if frame_for(rsp, u64::from(size)) == (frame, fpstate as u64) {
            MEASURED.store(size, Ordering::Relaxed);
        }
    }
}

/// Sends this thread a signal whose handler reads the FPU state's size
/// from its frame and checks [`frame_for`] against it; puts the signal's
/// action back after.
fn measure() -> Option<u64> {
    const SIGNAL: libc::c_int = libc::SIGURG;
    // SAFETY: a zeroed sigaction is a valid value to fill; the handler
    // only reads its own frame and stores into an atomic; the old action
    // is put back before this returns, and SIGURG, sent to this thread
    // only (`raise`), is delivered before `raise` returns (it is not
    // blocked while the handler is installed: its mask is emptied).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(SIGNAL, &action, &mut old) != 0 {
            return None;
        }
        let mut unblock: libc::sigset_t = std::mem::zeroed();
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut unblock);
        libc::sigaddset(&mut unblock, SIGNAL);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, &mut mask);
        libc::raise(SIGNAL);
        libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
        libc::sigaction(SIGNAL, &old, std::ptr::null_mut());
    }
    match MEASURED.load(Ordering::Relaxed) {
        0 => None,
        size => Some(u64::from(size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_frame_is_where_the_computation_says() {
        let size = fpu_size().expect("this machine's signal frame agrees with frame_for");
        // The legacy area, the header, and at least the AVX state.
        assert!((512 + 64 + 4..=64 * 1024).contains(&size), "{size}");
    }

    #[test]
    fn frames_are_aligned_as_the_kernel_aligns_them() {
        for rsp in [0x7fff_0000_1000u64, 0x7fff_0000_1008, 0x7fff_0000_0fc8] {
            let (frame, fpstate) = frame_for(rsp, 2700);
            assert_eq!(fpstate % 64, 0);
            assert_eq!((frame + 8) % 16, 0);
            assert!(frame + RT_SIGFRAME <= fpstate && fpstate + 2700 <= rsp - RED_ZONE);
        }
    }
}
