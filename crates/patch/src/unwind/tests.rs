//! The entries read by an independent DWARF reader (gimli), and the hook
//! run in this process over a table laid out as a code area's.

use super::*;
use gimli::{BaseAddresses, CfaRule, EhFrame, LittleEndian, RegisterRule, UnwindSection};

const RETURNS_TO: u64 = 0x5555_0000_1002;

type Slice<'a> = gimli::EndianSlice<'a, LittleEndian>;

/// An entry's CIE and FDE as gimli reads them.
fn parsed(
    e: &[u8],
) -> (
    EhFrame<Slice<'_>>,
    BaseAddresses,
    gimli::FrameDescriptionEntry<Slice<'_>>,
) {
    let section = EhFrame::new(&e[16..], LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(0x1000);
    let fde = section
        .fde_from_offset(
            &bases,
            gimli::EhFrameOffset(CIE_BYTES),
            EhFrame::cie_from_offset,
        )
        .expect("the FDE and its CIE parse");
    (section, bases, fde)
}
const RULE: Rule = Rule::Point {
    cfa_offset: 224,
    returns_to: RETURNS_TO,
};

/// On the `syscall` (a call to restart) the program stands on its own;
/// after it, after its own.
#[test]
fn an_entry_gives_the_points_stack_and_return_address() {
    let start = 0x7f00_1234_5670;
    let frames = Frame::at_syscall(start, RULE);
    for (frame, resumes_at) in frames.iter().zip([RETURNS_TO - 2, RETURNS_TO]) {
        let e = entry(frame);
        assert_eq!(&e[0..8], &frame.start.to_le_bytes());
        assert_eq!(&e[8..16], &(frame.start + 1).to_le_bytes());
        let (section, bases, fde) = parsed(&e);
        assert!(fde.cie().is_signal_trampoline(), "the CIE says 'S'");
        assert_eq!(fde.initial_address(), frame.start);
        let mut ctx = gimli::UnwindContext::new();
        let row = fde
            .unwind_info_for_address(&section, &bases, &mut ctx, frame.start)
            .expect("a row covers the address");
        assert_eq!(
            *row.cfa(),
            CfaRule::RegisterAndOffset {
                register: gimli::X86_64::RSP,
                offset: 224
            }
        );
        let RegisterRule::ValExpression(expr) = row.register(gimli::X86_64::RA) else {
            panic!("the return address is a value expression");
        };
        let bytes = expr.get(&section).unwrap().0.slice().to_vec();
        let mut want = vec![DW_OP_CONST8U];
        want.extend_from_slice(&resumes_at.to_le_bytes());
        assert_eq!(bytes, want);
        assert_eq!(row.register(gimli::X86_64::RBX), RegisterRule::Undefined);
        assert!(fde
            .unwind_info_for_address(&section, &bases, &mut ctx, frame.start + 1)
            .is_err());
    }
    assert_eq!(frames.map(|f| f.start), [start, start + 2]);
}

/// In the SIGSYS handler's call, every register the unwinder restores
/// comes from the signal frame whose address rbx holds.
#[test]
fn a_dispatched_calls_entry_reads_the_signal_frame() {
    for frame in Frame::at_syscall(0x7f00_0000_0010, Rule::Dispatched) {
        dispatched_entry(&frame);
    }
}

fn dispatched_entry(frame: &Frame) {
    use gimli::{Operation, Register};
    use weft_abi::sigaction::ucontext as uc;
    let e = entry(frame);
    let (section, bases, fde) = parsed(&e);
    let encoding = fde.cie().encoding();
    let mut ctx = gimli::UnwindContext::new();
    let row = fde
        .unwind_info_for_address(&section, &bases, &mut ctx, frame.start)
        .unwrap();
    let ops = |expr: gimli::UnwindExpression<usize>| {
        let mut ops = expr.get(&section).unwrap().operations(encoding);
        let mut out = Vec::new();
        while let Some(op) = ops.next().unwrap() {
            out.push(op);
        }
        out
    };
    let saved_at = |offset: u64| Operation::RegisterOffset {
        register: gimli::X86_64::RBX,
        offset: offset as i64,
        base_type: gimli::UnitOffset(0),
    };
    let deref = Operation::Deref {
        base_type: gimli::UnitOffset(0),
        size: 8,
        space: false,
    };
    let CfaRule::Expression(cfa) = row.cfa() else {
        panic!("the CFA is an expression: {:?}", row.cfa());
    };
    assert_eq!(ops(*cfa), vec![saved_at(uc::RSP), deref]);
    // On the call, the program stands on its own `syscall`: 2 bytes
    // before the frame's rip.
    match (frame.on_the_call, row.register(gimli::X86_64::RA)) {
        (true, RegisterRule::ValExpression(expr)) => assert_eq!(
            ops(expr),
            vec![
                saved_at(uc::RIP),
                deref,
                Operation::UnsignedConstant { value: 2 },
                Operation::Minus
            ]
        ),
        (false, RegisterRule::Expression(expr)) => assert_eq!(ops(expr), vec![saved_at(uc::RIP)]),
        other => panic!("the return address: {other:?}"),
    }
    for (reg, at) in [
        (gimli::X86_64::RBX, uc::RBX),
        (gimli::X86_64::RBP, uc::RBP),
        (Register(12), uc::R12),
        (Register(15), uc::R15),
    ] {
        let RegisterRule::Expression(expr) = row.register(reg) else {
            panic!("{reg:?} is saved in the frame: {:?}", row.register(reg));
        };
        assert_eq!(ops(expr), vec![saved_at(at)], "{reg:?}");
    }
}

/// Executable memory (RWX, anonymous) that stays mapped for the process.
fn executable(len: usize) -> *mut u8 {
    extern "C" {
        fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    }
    // SAFETY: an anonymous private mapping request; checked for failure.
    let p = unsafe { mmap(std::ptr::null_mut(), len, 7, 0x22, -1, 0) };
    assert!(!p.is_null() && p as isize != -1, "mmap failed");
    p
}

#[test]
fn the_hook_finds_weft_frames_and_passes_every_other_address_on() {
    const CODE: u64 = 0x4000;
    let area = executable((CODE + TABLE_HEADER + 4 * ENTRY_BYTES) as usize) as u64;
    // Listed first, holding nothing (a fresh mapping reads as a count of 0).
    let other_area = executable((CODE + TABLE_HEADER) as usize) as u64;
    let frames: Vec<Frame> = [(0x100, RULE), (0x200, Rule::Dispatched)]
        .into_iter()
        .flat_map(|(at, rule)| Frame::at_syscall(area + at, rule))
        .collect();
    let table = area + CODE;
    for (i, f) in frames.iter().enumerate() {
        let at = table + TABLE_HEADER + i as u64 * ENTRY_BYTES;
        // SAFETY: within the mapping made above, which is writable.
        unsafe {
            std::ptr::copy_nonoverlapping(entry(f).as_ptr(), at as *mut u8, ENTRY_BYTES as usize)
        };
    }
    // SAFETY: the table's count word, within the mapping.
    unsafe { *(table as *mut u64) = frames.len() as u64 };
    let areas: Vec<u64> = vec![other_area, area, 0, 0];

    // What libgcc's own lookup stands for: returns a marker.
    let fallback = executable(4096);
    let fallback_code = [0x48, 0xb8, 0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0, 0xc3]; // mov rax, 0xdeadbeef; ret
                                                                                // SAFETY: the mapping is writable and longer than the code.
    unsafe { std::ptr::copy_nonoverlapping(fallback_code.as_ptr(), fallback, fallback_code.len()) };
    let hook = executable(4096);
    let code = find_fde_hook(hook as u64, areas.as_ptr() as u64, 4, CODE, fallback as u64).unwrap();
    // SAFETY: the mapping is writable and 4096 bytes long.
    unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), hook, code.len()) };
    // SAFETY: the hook takes (pc, bases), writes three words at bases
    // only when it returns an entry, touches no stack and returns with
    // `ret`: a C function of two arguments.
    let find: extern "C" fn(u64, *mut [u64; 3]) -> u64 = unsafe { std::mem::transmute(hook) };

    let mut bases = [7u64; 3];
    for (i, f) in frames.iter().enumerate() {
        let fde = table + TABLE_HEADER + i as u64 * ENTRY_BYTES + FDE_AT as u64;
        assert_eq!(find(f.start, &mut bases), fde, "pc {:#x}", f.start);
        assert_eq!(bases, [0, 0, f.start]);
    }
    let mut untouched = [7u64; 3];
    assert_eq!(
        find(area + 0x150, &mut untouched),
        0,
        "weft's code without an entry"
    );
    assert_eq!(find(area + 0x101, &mut untouched), 0, "inside the syscall");
    assert_eq!(
        find(other_area + 8, &mut untouched),
        0,
        "an area without entries"
    );
    assert_eq!(untouched, [7; 3]);
    assert_eq!(
        find(area + CODE, &mut untouched),
        0xdead_beef,
        "past the code"
    );
    assert_eq!(
        find(0x1000, &mut untouched),
        0xdead_beef,
        "another library's code"
    );
    assert_eq!(untouched, [7; 3]);
}
