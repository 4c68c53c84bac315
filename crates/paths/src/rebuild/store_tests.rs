//! The witness store run in this process: it writes its record at the
//! thread's cursor (`fs:[CURSOR]`), moves the cursor past it, and keeps
//! every register and flag that liveness says is live.

use super::*;
use iced_x86::code_asm::{registers::gpr64::*, *};
use iced_x86::{BlockEncoder, BlockEncoderOptions, InstructionBlock};
use weft_code::{FLAG_AF, FLAG_CF, FLAG_OF, FLAG_PF, FLAG_SF, FLAG_ZF, STATUS_FLAGS};

/// The RFLAGS bit that is always set.
const RFLAGS_FIXED: u64 = 0x2;

/// RFLAGS bit of each flag liveness tracks.
const FLAG_BITS: [(u32, u64); 6] = [
    (FLAG_CF, 0x1),
    (FLAG_PF, 0x4),
    (FLAG_AF, 0x10),
    (FLAG_ZF, 0x40),
    (FLAG_SF, 0x80),
    (FLAG_OF, 0x800),
];

/// Every general register but `rsp`, in the order the harness saves them.
const SAVED: [AsmRegister64; 15] = [
    rax, rcx, rdx, rbx, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15,
];
const SAVED_REGS: [Register; 15] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RBX,
    Register::RBP,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
    Register::R12,
    Register::R13,
    Register::R14,
    Register::R15,
];

/// What the harness reads in and writes out (`#[repr(C)]`: its code
/// addresses the fields by offset).
#[repr(C)]
#[derive(Default)]
struct State {
    flags_in: u64,
    flags_out: u64,
    regs_out: [u64; 15],
}

fn builder() -> Builder {
    Builder::new(0, false, Vec::new(), AfterSyscall::Nothing, 0..0)
}

/// A register's value in the harness: distinct, and all 64 bits used.
fn value_of(k: usize) -> u64 {
    0x0101_0101_0101_0101u64.wrapping_mul(k as u64 + 1) ^ 0x8000_0000_0000_0000
}

/// `extern "C" fn(&mut State)`: sets the flags from `flags_in` and every
/// register to [`value_of`], runs `store`, and writes the flags and
/// registers back.
fn harness(store: &[Instruction]) -> Vec<u8> {
    let mut all = harness_around(store);
    for i in all.iter_mut() {
        i.set_ip(0);
    }
    let r = BlockEncoder::encode(
        64,
        InstructionBlock::new(&all, 0x1000),
        BlockEncoderOptions::NONE,
    )
    .unwrap();
    r.code_buffer
}

/// The harness's instructions around `store`, whose addresses (fake
/// ones included) are kept.
fn harness_around(store: &[Instruction]) -> Vec<Instruction> {
    let mut a = CodeAssembler::new(64).unwrap();
    for r in [rbx, rbp, r12, r13, r14, r15] {
        a.push(r).unwrap();
    }
    a.push(rdi).unwrap();
    a.push(qword_ptr(rdi)).unwrap();
    a.popfq().unwrap();
    for (k, &r) in SAVED.iter().enumerate() {
        a.mov(r, value_of(k)).unwrap();
    }
    let mut before = a.take_instructions();
    let mut b = CodeAssembler::new(64).unwrap();
    b.pushfq().unwrap();
    for &r in &SAVED {
        b.push(r).unwrap();
    }
    b.mov(rdi, qword_ptr(rsp + 16 * 8)).unwrap();
    for k in (0..SAVED.len()).rev() {
        b.pop(qword_ptr(rdi + 16 + 8 * k as i32)).unwrap();
    }
    b.pop(qword_ptr(rdi + 8)).unwrap();
    b.pop(rdi).unwrap();
    for r in [r15, r14, r13, r12, rbp, rbx] {
        b.pop(r).unwrap();
    }
    b.ret().unwrap();
    for i in before.iter_mut() {
        i.set_ip(0);
    }
    before.extend_from_slice(store);
    let mut after = b.take_instructions();
    for i in after.iter_mut() {
        i.set_ip(0);
    }
    before.extend(after);
    before
}

/// Runs `code` (from [`harness`]) with the cursor at `buffer`; returns
/// the state and where the cursor ended.
fn run(code: &[u8], flags_in: u64, buffer: &mut [u8]) -> (State, u64) {
    let mut map = memmap2::MmapMut::map_anon(code.len()).unwrap();
    map.copy_from_slice(code);
    let map = map.make_exec().unwrap();
    let mut state = State {
        flags_in,
        ..State::default()
    };
    let cursor_before: u64;
    let cursor_after: u64;
    // SAFETY: the mapping holds the whole harness, which keeps the
    // callee-saved registers and rsp as the System V ABI asks, reads and
    // writes only `state`, and stores its record at the cursor, which
    // points into `buffer` (larger than any record). The cursor is glibc's
    // `tcbhead_t.unused_vgetcpu_cache[1]` (see `CURSOR`), which nothing
    // else in this thread reads; its old value is put back.
    unsafe {
        core::arch::asm!("mov {0}, fs:[{1}]", out(reg) cursor_before, const CURSOR);
        core::arch::asm!("mov fs:[{1}], {0}", in(reg) buffer.as_mut_ptr(), const CURSOR);
        let f: extern "C" fn(&mut State) = std::mem::transmute(map.as_ptr());
        f(&mut state);
        core::arch::asm!("mov {0}, fs:[{1}]", out(reg) cursor_after, const CURSOR);
        core::arch::asm!("mov fs:[{1}], {0}", in(reg) cursor_before, const CURSOR);
    }
    (state, cursor_after - buffer.as_ptr() as u64)
}

#[test]
fn a_store_keeps_every_live_register_and_flag() {
    let flag_sets = [
        STATUS_FLAGS,
        STATUS_FLAGS & !FLAG_OF,
        FLAG_OF,
        FLAG_CF | FLAG_ZF,
        0,
    ];
    let reg_sets: [&[Register]; 4] = [&SAVED_REGS, &[], &[Register::RAX], &SAVED_REGS[1..]];
    for &flags in &flag_sets {
        for regs in reg_sets {
            let live = RegSet(RegSet::of_all(regs).0 | flags);
            for record in [
                Record::Witness(7),
                Record::Witness(0x234),
                Record::Witness(0x1234),
            ] {
                let mut b = builder();
                let seq = b.store_sequence(record, live).unwrap();
                let code = harness(&seq);
                for bits in 0..64u64 {
                    let flags_in = RFLAGS_FIXED
                        | FLAG_BITS
                            .iter()
                            .enumerate()
                            .filter(|(k, _)| bits & (1 << k) != 0)
                            .map(|(_, &(_, bit))| bit)
                            .sum::<u64>();
                    let mut buffer = [0u8; 16];
                    let (out, moved) = run(&code, flags_in, &mut buffer);
                    let context = format!("{record:?}, live {live}, flags in {flags_in:#x}");
                    assert_eq!(moved, record.len() as u64, "cursor: {context}");
                    let width = record.store_width() as usize;
                    assert_eq!(
                        &buffer[..width],
                        &record.value().to_le_bytes()[..width],
                        "record: {context}"
                    );
                    for &(flag, bit) in &FLAG_BITS {
                        if live.flags_live(flag) {
                            assert_eq!(
                                out.flags_out & bit,
                                flags_in & bit,
                                "flag {bit:#x}: {context}"
                            );
                        }
                    }
                    for (k, &r) in SAVED_REGS.iter().enumerate() {
                        if live.contains(r) {
                            assert_eq!(out.regs_out[k], value_of(k), "{r:?}: {context}");
                        }
                    }
                }
            }
        }
    }
}

extern "C" {
    /// glibc's offset of the thread's `struct rseq` from the thread
    /// pointer (2.35 and later).
    static __rseq_offset: isize;
    /// Its size, 0 if glibc registered none.
    static __rseq_size: u32;
}

/// glibc's `RSEQ_SIG` on x86.
const GLIBC_RSEQ_SIG: u32 = 0x5305_3053;

extern "C" fn ignore(_: libc::c_int) {}

#[test]
fn a_restartable_store_writes_its_record_and_arms_a_section_the_kernel_accepts() {
    // SAFETY: plain reads of two constants glibc sets before main.
    let (offset, size) = unsafe { (__rseq_offset, __rseq_size) };
    if size == 0 {
        // glibc.pthread.rseq=0, or a seccomp filter refusing rseq(2).
        assert!(
            std::env::var_os("WEFT_CI").is_none_or(|v| v.is_empty()),
            "WEFT_CI is set, so a skip is a failure: glibc registered no restartable sequence"
        );
        eprintln!("skipped: glibc registered no restartable sequence for this thread");
        return;
    }
    let cs_offset = i32::try_from(offset + 8).unwrap();
    let live_sets = [
        RegSet(RegSet::of_all(&SAVED_REGS).0 | STATUS_FLAGS),
        RegSet::of_all(&[]),
        RegSet(RegSet::of_all(&[Register::RAX]).0 | FLAG_CF),
    ];
    for live in live_sets {
        for record in [
            Record::Witness(7),
            Record::Witness(0x234),
            Record::Witness(0x1234),
        ] {
            let mut map = memmap2::MmapMut::map_anon(16 * 1024).unwrap();
            let at = map.as_ptr() as u64;
            let mut b = Builder::new(at, false, Vec::new(), AfterSyscall::Nothing, 0..0);
            b.rseq = Some(Rseq {
                cs_offset,
                signature: GLIBC_RSEQ_SIG,
            });
            let seq = b.store_sequence(record, live).unwrap();
            assert_eq!(b.rseq_sites.len(), 1, "one critical section a store");
            let all = harness_around(&seq);
            let code_at = at + 8 * b.literals.len() as u64;
            let r = BlockEncoder::encode(
                64,
                InstructionBlock::new(&all, code_at),
                BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
            )
            .unwrap();
            let mut bytes: Vec<u8> = b.literals.iter().flat_map(|l| l.to_le_bytes()).collect();
            bytes.extend_from_slice(&r.code_buffer);
            let placed = |fake: u64| {
                let k = all.iter().position(|i| i.ip() == fake)?;
                Some(code_at + r.new_instruction_offsets[k] as u64)
            };
            restartable::fill_descriptors(&b.rseq_sites, &mut bytes, at, GLIBC_RSEQ_SIG, placed)
                .unwrap();
            map[..bytes.len()].copy_from_slice(&bytes);
            let map = map.make_exec().unwrap();
            let descriptor = b.at + 8 * b.rseq_sites[0].literal as u64;
            let mut buffer = [0u8; 16];
            let mut state = State {
                flags_in: RFLAGS_FIXED | 0x8c1,
                ..State::default()
            };
            let (cursor_before, cursor_after, armed, after_signal): (u64, u64, u64, u64);
            // SAFETY: as in `run`; besides, the store writes the address
            // of its descriptor (inside `map`) into this thread's
            // registered `rseq_cs`, which is read back, then cleared by
            // the kernel at the signal (the thread's pc is outside the
            // section) and set to 0 here in any case before `map` goes.
            unsafe {
                let f: extern "C" fn(&mut State) = std::mem::transmute(code_at as usize);
                core::arch::asm!("mov {0}, fs:[{1}]", out(reg) cursor_before, const CURSOR);
                core::arch::asm!("mov fs:[{1}], {0}", in(reg) buffer.as_mut_ptr(), const CURSOR);
                f(&mut state);
                core::arch::asm!("mov {0}, fs:[{1}]", out(reg) cursor_after, const CURSOR);
                core::arch::asm!("mov fs:[{1}], {0}", in(reg) cursor_before, const CURSOR);
                core::arch::asm!("mov {0}, fs:[{1}]", out(reg) armed, in(reg) cs_offset as i64);
                libc::signal(libc::SIGUSR1, ignore as *const () as usize);
                libc::raise(libc::SIGUSR1);
                core::arch::asm!("mov {0}, fs:[{1}]", out(reg) after_signal, in(reg) cs_offset as i64);
                core::arch::asm!("mov qword ptr fs:[{0}], 0", in(reg) cs_offset as i64);
            }
            drop(map);
            let context = format!("{record:?}, live {live}");
            assert_eq!(
                cursor_after - buffer.as_ptr() as u64,
                record.len() as u64,
                "{context}"
            );
            let width = record.store_width() as usize;
            assert_eq!(
                &buffer[..width],
                &record.value().to_le_bytes()[..width],
                "{context}"
            );
            assert_eq!(armed, descriptor, "the store armed its section: {context}");
            assert_eq!(
                after_signal, 0,
                "the kernel took the section and cleared it: {context}"
            );
            for &(flag, bit) in &FLAG_BITS {
                if live.flags_live(flag) {
                    assert_eq!(
                        state.flags_out & bit,
                        state.flags_in & bit,
                        "flag {bit:#x}: {context}"
                    );
                }
            }
            for (k, &reg) in SAVED_REGS.iter().enumerate() {
                if live.contains(reg) {
                    assert_eq!(state.regs_out[k], value_of(k), "{reg:?}: {context}");
                }
            }
        }
    }
}
