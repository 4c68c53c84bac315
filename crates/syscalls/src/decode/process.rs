//! Process calls' values as strace 6 shows them: `clone`'s arguments
//! (`child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD,
//! child_tidptr=0x7f...`) and the `struct sysinfo` `sysinfo` fills.

use super::names::Bits;
use super::signals::signal;
use super::{bits, pointer};

/// `clone`'s flags above its exit signal, in strace's order
/// (`CLONE_DETACHED`, which the kernel ignores, is left as a number).
const CLONE_FLAGS: Bits = &[
    (0x100, "CLONE_VM"),
    (0x200, "CLONE_FS"),
    (0x400, "CLONE_FILES"),
    (0x800, "CLONE_SIGHAND"),
    (0x1000, "CLONE_PIDFD"),
    (0x2000, "CLONE_PTRACE"),
    (0x4000, "CLONE_VFORK"),
    (0x8000, "CLONE_PARENT"),
    (0x10000, "CLONE_THREAD"),
    (0x20000, "CLONE_NEWNS"),
    (0x40000, "CLONE_SYSVSEM"),
    (0x80000, "CLONE_SETTLS"),
    (0x100000, "CLONE_PARENT_SETTID"),
    (0x200000, "CLONE_CHILD_CLEARTID"),
    (0x800000, "CLONE_UNTRACED"),
    (0x1000000, "CLONE_CHILD_SETTID"),
    (0x2000000, "CLONE_NEWCGROUP"),
    (0x4000000, "CLONE_NEWUTS"),
    (0x8000000, "CLONE_NEWIPC"),
    (0x10000000, "CLONE_NEWUSER"),
    (0x20000000, "CLONE_NEWPID"),
    (0x40000000, "CLONE_NEWNET"),
    (0x80000000, "CLONE_IO"),
];

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_SETTLS: u64 = 0x80000;
const CLONE_PARENT_SETTID: u64 = 0x100000;
const CLONE_CHILD_CLEARTID: u64 = 0x200000;
const CLONE_CHILD_SETTID: u64 = 0x1000000;
/// The exit signal's bits.
const CSIGNAL: u64 = 0xff;

/// `clone`'s arguments as strace names them (x86-64's order: flags,
/// stack, parent's tid, child's tid, TLS), the optional ones only with
/// the flags that use them. The parent's tid is the new thread's id the
/// kernel stored there, which the call returned (`parent_tid=[5458]`);
/// a pidfd there (`CLONE_PIDFD`) or a failed call's is not recorded,
/// and shows the address.
pub(super) fn clone(raw: &[u64; 6], result: Option<i64>) -> Vec<String> {
    let flags = raw[0] & !CSIGNAL;
    let exit_signal = raw[0] & CSIGNAL;
    let flags_text = match (flags, exit_signal) {
        (0, 0) => "0".to_string(),
        (0, s) => signal(s),
        (f, 0) => bits(f, CLONE_FLAGS, "0"),
        (f, s) => format!("{}|{}", bits(f, CLONE_FLAGS, "0"), signal(s)),
    };
    let mut args = vec![
        format!("child_stack={}", pointer(raw[1])),
        format!("flags={flags_text}"),
    ];
    if flags & (CLONE_PARENT_SETTID | CLONE_PIDFD) != 0 {
        let tid = match result {
            Some(tid) if tid > 0 && flags & CLONE_PARENT_SETTID != 0 => format!("[{tid}]"),
            _ => pointer(raw[2]),
        };
        args.push(format!("parent_tid={tid}"));
    }
    if flags & CLONE_SETTLS != 0 {
        args.push(format!("tls={}", pointer(raw[4])));
    }
    if flags & (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID) != 0 {
        args.push(format!("child_tidptr={}", pointer(raw[3])));
    }
    args
}

/// The `struct sysinfo` (112 bytes on x86-64) as strace shows it; none
/// for fewer bytes.
pub(super) fn sysinfo(bytes: &[u8]) -> Option<String> {
    let word = |at: usize, n: usize| -> Option<u64> {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(bytes.get(at..at + n)?);
        Some(u64::from_le_bytes(v))
    };
    let long = |k: usize| word(8 * k, 8);
    Some(format!(
        "{{uptime={}, loads=[{}, {}, {}], totalram={}, freeram={}, sharedram={}, \
         bufferram={}, totalswap={}, freeswap={}, procs={}, totalhigh={}, freehigh={}, \
         mem_unit={}}}",
        long(0)?,
        long(1)?,
        long(2)?,
        long(3)?,
        long(4)?,
        long(5)?,
        long(6)?,
        long(7)?,
        long(8)?,
        long(9)?,
        word(80, 2)?,
        long(11)?,
        long(12)?,
        word(104, 4)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(raw: [u64; 6], result: i64) -> String {
        clone(&raw, Some(result)).join(", ")
    }

    /// strace 6.1's lines on this machine (fork, raw `clone`s).
    #[test]
    fn clone_reads_as_strace_shows_it() {
        // fork()
        assert_eq!(
            shown([0x1200011, 0, 0, 0x7f22_dbf7_4a10, 0, 0], 5457),
            "child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, \
             child_tidptr=0x7f22dbf74a10"
        );
        assert_eq!(
            shown([0x811, 0, 0, 0, 0, 0], -22),
            "child_stack=NULL, flags=CLONE_SIGHAND|SIGCHLD"
        );
        assert_eq!(
            shown([0x3f0f00, 0x1000, 0x2000, 0x3000, 0x4000, 0], -22),
            "child_stack=0x1000, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|\
             CLONE_THREAD|CLONE_NEWNS|CLONE_SYSVSEM|CLONE_SETTLS|CLONE_PARENT_SETTID|\
             CLONE_CHILD_CLEARTID, parent_tid=0x2000, tls=0x4000, child_tidptr=0x3000"
        );
        assert_eq!(
            shown([0x100011, 0, 0x7ffc_0000_0010, 0, 0, 0], 8482),
            "child_stack=NULL, flags=CLONE_PARENT_SETTID|SIGCHLD, parent_tid=[8482]"
        );
        assert_eq!(shown([0, 0, 0, 0, 0, 0], 8483), "child_stack=NULL, flags=0");
        assert_eq!(
            shown([77, 0, 0, 0, 0, 0], 8485),
            "child_stack=NULL, flags=77"
        );
        assert_eq!(
            shown([0xff00_0000_0080_0011, 0, 0, 0, 0, 0], 8484),
            "child_stack=NULL, flags=CLONE_UNTRACED|0xff00000000000000|SIGCHLD"
        );
    }

    #[test]
    fn sysinfo_reads_as_strace_shows_it() {
        let text = "f7ca000000000000a04d000000000000a017010000000000609301000000000000f098e2\
                    050000000050c3ae0400000000608a000000000000e0f101000000000000000000000000\
                    0000000000000000530000000000000000000000000000000000000000000000010000\
                    0000000000";
        let bytes: Vec<u8> = (0..text.len())
            .step_by(2)
            .map(|k| u8::from_str_radix(&text[k..k + 2], 16).unwrap())
            .collect();
        assert_eq!(bytes.len(), 112);
        assert_eq!(
            sysinfo(&bytes).unwrap(),
            "{uptime=51959, loads=[19872, 71584, 103264], totalram=25276510208, \
             freeram=20111904768, sharedram=9068544, bufferram=32628736, totalswap=0, \
             freeswap=0, procs=83, totalhigh=0, freehigh=0, mem_unit=1}"
        );
        assert_eq!(sysinfo(&bytes[..100]), None);
    }
}
