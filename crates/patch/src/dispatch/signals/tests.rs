//! The stub's knowledge of the bytes weft's other code is made of.

use super::*;

/// A program that makes its point's call marks `RETURNED` right
/// after the `pop r11` that follows the call, in the bytes the stub
/// looks for.
#[test]
fn the_stub_knows_the_bytes_that_mark_returned() {
    use weft_plan::{Guarded, Primitive};
    let table = crate::mini::ThreadTable {
        addr: 0x10_0000,
        slots: 16,
        ring_wait_until: 0x1000,
        ring_overwrite: 0x1008,
        ring_data: 4096,
        no_slot: 0x1010,
        dispatch: 0x1018,
        return_stacks: 0x1020,
        clock_gettime: 0,
        tid_offset: 0,
        startup: None,
        vclock: None,
        lanes: crate::lanes::Lanes {
            source: crate::lanes::CpuSource::None,
            count: 1,
            stride: 8,
        },
    };
    let always = |primitive| Guarded {
        predicate: None,
        primitive,
    };
    let program = [
        always(Primitive::AddThreadCounter(0, weft_plan::Expr::Const(1))),
        always(Primitive::MakeCall { left: None }),
    ];
    let mini = crate::mini::mini_trampoline(0x40_0000, table, &program).unwrap();
    let mut marked = POP_R11.to_le_bytes()[..2].to_vec();
    marked.extend_from_slice(&MARK_RETURNED_HEAD.to_le_bytes());
    marked.extend_from_slice(&[0, 0, 0]);
    assert!(
        mini.windows(marked.len()).any(|w| w == marked),
        "pop r11, then the marking"
    );
    // The call's `syscall`, its result stored, then that `pop r11`
    // 5 or 8 bytes after the `syscall`'s end.
    let made = crate::mini::assemble_mini(
        0x40_0000,
        table,
        &program,
        crate::mini::returns::Extra::None,
    )
    .unwrap();
    for &at in &made.made_calls {
        let after = at as usize + 2;
        assert!(
            [5, 8]
                .iter()
                .any(|&k| mini[after + k..after + k + 2] == [0x41, 0x5b]),
            "{:02x?}",
            &mini[after..after + 12]
        );
    }
}

/// The bytes the stub looks for before a jump back to the program are
/// those of the trampoline's clearing of `RETURNED`.
#[test]
fn the_stub_knows_the_bytes_that_clear_returned() {
    let clear = crate::trampoline::clear_returned().unwrap();
    let bytes = crate::relocate::encode_block(&[clear], 0x1000).unwrap();
    assert_eq!(bytes.len(), CLEAR_RETURNED_LEN as usize);
    assert_eq!(bytes[..8], CLEAR_RETURNED_HEAD.to_le_bytes());
    assert_eq!(bytes[7..], [0, 0, 0, 0]);
}
