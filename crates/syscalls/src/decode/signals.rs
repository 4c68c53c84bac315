//! Signals as strace 6 names them: a signal (`SIGCHLD`, `SIGRTMIN` for 32,
//! `SIGRT_1` for 33), a signal set (`[INT RT_8]`, `~[RTMIN RT_1]` when
//! most are in it), `rt_sigprocmask`'s `how` and a kernel `struct
//! sigaction` (`{sa_handler=SIG_DFL, sa_mask=[], sa_flags=0}`).

use super::names::{Bits, SIGNALS};
use super::{bits, pointer};

/// The first real-time signal (the kernel's, not glibc's `SIGRTMIN`,
/// which reserves two for itself).
const SIGRTMIN: u64 = 32;
/// The last signal.
const SIGRTMAX: u64 = 64;

/// A signal's name (`SIGCHLD`, `SIGRTMIN`, `SIGRT_1`), else the number
/// (0, or a number beyond the last signal).
pub(super) fn signal(value: u64) -> String {
    match value {
        1..=31 => SIGNALS[value as usize - 1].to_string(),
        SIGRTMIN => "SIGRTMIN".to_string(),
        33..=SIGRTMAX => format!("SIGRT_{}", value - SIGRTMIN),
        _ => value.to_string(),
    }
}

/// A signal's name in a set: without its `SIG` (`INT`, `RTMIN`, `RT_1`).
fn member(signal_number: u64) -> String {
    let name = signal(signal_number);
    match name.strip_prefix("SIG") {
        Some(short) => short.to_string(),
        None => name,
    }
}

/// A kernel signal set of 8 bytes as strace prints one: its signals in
/// brackets, or `~` and those left out when two thirds or more are in it
/// (`~[]` for all). Another size is not decoded (strace shows the
/// address then).
pub(super) fn sigset(bytes: &[u8]) -> Option<String> {
    let mut mask = u64::from_le_bytes(bytes.try_into().ok()?);
    let mut out = String::new();
    // strace counts 64 bits; 43 set is two thirds.
    if mask.count_ones() >= 64 * 2 / 3 {
        mask = !mask;
        out.push('~');
    }
    let members: Vec<String> = (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| member(bit + 1))
        .collect();
    out.push_str(&format!("[{}]", members.join(" ")));
    Some(out)
}

/// `rt_sigprocmask`'s `how`: its name, else the number in hex with
/// strace's comment.
pub(super) fn sigprocmask_how(value: u64) -> String {
    match value {
        0 => "SIG_BLOCK".to_string(),
        1 => "SIG_UNBLOCK".to_string(),
        2 => "SIG_SETMASK".to_string(),
        v => format!("{v:#x} /* SIG_??? */"),
    }
}

/// `sa_flags`' bits, in strace's order.
const SA_FLAGS: Bits = &[
    (0x0400_0000, "SA_RESTORER"),
    (0x0800_0000, "SA_ONSTACK"),
    (0x1000_0000, "SA_RESTART"),
    (0x2000_0000, "SA_INTERRUPT"),
    (0x4000_0000, "SA_NODEFER"),
    (0x8000_0000, "SA_RESETHAND"),
    (0x4, "SA_SIGINFO"),
    (0x1, "SA_NOCLDSTOP"),
    (0x2, "SA_NOCLDWAIT"),
];

/// `SA_RESTORER`: strace shows `sa_restorer` only with it.
const SA_RESTORER: u64 = 0x0400_0000;

/// A kernel `struct sigaction` (x86-64: handler, flags, restorer, mask;
/// 32 bytes) as strace shows it; none for fewer bytes.
pub(super) fn sigaction(bytes: &[u8]) -> Option<String> {
    let field = |k: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bytes.get(8 * k..8 * k + 8)?.try_into().ok()?,
        ))
    };
    let (handler, flags, restorer) = (field(0)?, field(1)?, field(2)?);
    let mask = sigset(bytes.get(24..32)?)?;
    let handler = match handler {
        0 => "SIG_DFL".to_string(),
        1 => "SIG_IGN".to_string(),
        u64::MAX => "SIG_ERR".to_string(),
        h => pointer(h),
    };
    let restorer = match flags & SA_RESTORER {
        0 => String::new(),
        _ => format!(", sa_restorer={}", pointer(restorer)),
    };
    Some(format!(
        "{{sa_handler={handler}, sa_mask={mask}, sa_flags={}{restorer}}}",
        bits(flags, SA_FLAGS, "0")
    ))
}

/// A recorded delivery of `signo` (`weft_abi::delivery`: its record's
/// arguments `args`) as strace shows one, without the times a `SIGCHLD`'s
/// also has: `--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED,
/// si_pid=7, si_uid=0, si_status=0} ---`.
pub(crate) fn delivery(signo: i32, args: &[u64; 6]) -> String {
    let name = signal(signo as u64);
    let code = args[3] as i32;
    let (low, high) = (args[4] as u32, (args[4] >> 32) as u32);
    let sender = format!("si_pid={low}, si_uid={high}");
    let value = |v: u64| {
        let ptr = match v {
            0 => "NULL".to_string(),
            v => format!("{v:#x}"),
        };
        format!("si_int={}, si_ptr={ptr}", v as i32)
    };
    let fields = match (signo, code) {
        (17, 1..=6) => {
            const CLD: [&str; 6] = [
                "CLD_EXITED",
                "CLD_KILLED",
                "CLD_DUMPED",
                "CLD_TRAPPED",
                "CLD_STOPPED",
                "CLD_CONTINUED",
            ];
            let status = args[5] as i32;
            let status = match code {
                1 => status.to_string(),
                _ => signal(status as u64),
            };
            format!(
                "si_code={}, {sender}, si_status={status}",
                CLD[code as usize - 1]
            )
        }
        (_, 0) => format!("si_code=SI_USER, {sender}"),
        (_, -6) => format!("si_code=SI_TKILL, {sender}"),
        (_, -1) => format!("si_code=SI_QUEUE, {sender}, {}", value(args[5])),
        // strace's `%#x`: 0 without a prefix.
        (_, -2) => format!(
            "si_code=SI_TIMER, si_timerid={}, si_overrun={high}, {}",
            match low {
                0 => "0".to_string(),
                t => format!("{t:#x}"),
            },
            value(args[5])
        ),
        (_, 0x80) => "si_code=SI_KERNEL".to_string(),
        (_, code) => format!("si_code={code}, {sender}"),
    };
    format!("--- {name} {{si_signo={name}, {fields}}} ---")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|k| u8::from_str_radix(&text[k..k + 2], 16).unwrap())
            .collect()
    }

    /// strace 6.1's lines for `kill(-99999, N)`, `rt_sigprocmask` and
    /// `rt_sigaction` on this machine, with the bytes the kernel had.
    #[test]
    fn signals_read_as_strace_names_them() {
        assert_eq!(signal(17), "SIGCHLD");
        assert_eq!(signal(32), "SIGRTMIN");
        assert_eq!(signal(33), "SIGRT_1");
        assert_eq!(signal(34), "SIGRT_2");
        assert_eq!(signal(64), "SIGRT_32");
        assert_eq!(signal(65), "65");
        assert_eq!(signal(0), "0");
        assert_eq!(sigprocmask_how(2), "SIG_SETMASK");
        assert_eq!(sigprocmask_how(7), "0x7 /* SIG_??? */");
    }

    /// strace 6.1's lines for a `sigqueue` of 9 and a POSIX timer's
    /// signal whose value is 5, on this machine.
    #[test]
    fn queued_and_timer_deliveries_read_as_strace_shows_them() {
        let queued = [0, 0, 34, -1i64 as u64, 25532, 9];
        assert_eq!(
            delivery(34, &queued),
            "--- SIGRT_2 {si_signo=SIGRT_2, si_code=SI_QUEUE, si_pid=25532, si_uid=0, \
             si_int=9, si_ptr=0x9} ---"
        );
        let timer = [0, 0, 14, -2i64 as u64, 0, 5];
        assert_eq!(
            delivery(14, &timer),
            "--- SIGALRM {si_signo=SIGALRM, si_code=SI_TIMER, si_timerid=0, si_overrun=0, \
             si_int=5, si_ptr=0x5} ---"
        );
    }

    #[test]
    fn sets_read_as_strace_shows_them() {
        assert_eq!(sigset(&[0; 8]).unwrap(), "[]");
        assert_eq!(sigset(&[0xff; 8]).unwrap(), "~[]");
        // [USR1 RT_2 RT_3 RT_32]
        let set = (1u64 << 9) | (1 << 33) | (1 << 34) | (1 << 63);
        assert_eq!(
            sigset(&set.to_le_bytes()).unwrap(),
            "[USR1 RT_2 RT_3 RT_32]"
        );
        assert_eq!(
            sigset(&0x5555_5555_5555_5555u64.to_le_bytes()).unwrap(),
            "[HUP QUIT TRAP BUS KILL SEGV PIPE TERM CHLD STOP TTIN URG XFSZ PROF IO SYS \
             RT_1 RT_3 RT_5 RT_7 RT_9 RT_11 RT_13 RT_15 RT_17 RT_19 RT_21 RT_23 RT_25 \
             RT_27 RT_29 RT_31]"
        );
        assert_eq!(
            sigset(&0xffff_ffff_7fff_fffeu64.to_le_bytes()).unwrap(),
            "~[HUP RTMIN]"
        );
        assert_eq!(
            sigset(&hex("fefefb7fffffffff")).unwrap(),
            "~[HUP KILL STOP RTMIN]"
        );
        assert_eq!(sigset(&[0; 4]), None, "strace shows the address");
    }

    #[test]
    fn actions_read_as_strace_shows_them() {
        assert_eq!(
            sigaction(&hex(
                "e013d18321560000040000140000000050e03409747f00000200000080000000"
            ))
            .unwrap(),
            "{sa_handler=0x562183d113e0, sa_mask=[INT RT_8], \
             sa_flags=SA_RESTORER|SA_RESTART|SA_SIGINFO, sa_restorer=0x7f740934e050}"
        );
        assert_eq!(
            sigaction(&[0; 32]).unwrap(),
            "{sa_handler=SIG_DFL, sa_mask=[], sa_flags=0}"
        );
        let mut ignored = [0u8; 32];
        ignored[0] = 1;
        ignored[8..16].copy_from_slice(&SA_RESTORER.to_le_bytes());
        ignored[16..24].copy_from_slice(&0x7fe0_9636_5050u64.to_le_bytes());
        assert_eq!(
            sigaction(&ignored).unwrap(),
            "{sa_handler=SIG_IGN, sa_mask=[], sa_flags=SA_RESTORER, sa_restorer=0x7fe096365050}"
        );
        // A new action as strace showed it (weft records only the old
        // one, but the layout is the same): glibc's flags sign-extended.
        let mut flagged = [0u8; 32];
        flagged[8..16].copy_from_slice(&0xffff_ffff_cc00_0407u64.to_le_bytes());
        flagged[0..8].copy_from_slice(&0x564a_2e67_4660u64.to_le_bytes());
        flagged[16..24].copy_from_slice(&0x7fe0_9636_5050u64.to_le_bytes());
        flagged[24..32].copy_from_slice(&0xffff_fffe_7fff_ffffu64.to_le_bytes());
        assert_eq!(
            sigaction(&flagged).unwrap(),
            "{sa_handler=0x564a2e674660, sa_mask=~[RTMIN RT_1], \
             sa_flags=SA_RESTORER|SA_ONSTACK|SA_NODEFER|SA_RESETHAND|SA_SIGINFO|SA_NOCLDSTOP|\
             SA_NOCLDWAIT|0xffffffff00000400, sa_restorer=0x7fe096365050}"
        );
        assert_eq!(sigaction(&[0; 31]), None);
    }

    #[test]
    fn a_delivery_reads_as_strace_shows_it() {
        let chld = [0, 0, 17, 1, 7 | 1000 << 32, 3];
        assert_eq!(
            delivery(17, &chld),
            "--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=7, si_uid=1000, si_status=3} ---"
        );
        let stopped = [0, 0, 17, 5, 7, 19];
        assert!(
            delivery(17, &stopped).contains("CLD_STOPPED, si_pid=7, si_uid=0, si_status=SIGSTOP")
        );
        let killed = [0, 0, 10, (-6i32) as u32 as u64, 9, 0];
        assert_eq!(
            delivery(10, &killed),
            "--- SIGUSR1 {si_signo=SIGUSR1, si_code=SI_TKILL, si_pid=9, si_uid=0} ---"
        );
        assert_eq!(
            delivery(14, &[0, 0, 14, 0x80, 0, 0]),
            "--- SIGALRM {si_signo=SIGALRM, si_code=SI_KERNEL} ---"
        );
    }
}
