//! Wakes weft when the follower has news. weft waits for the load hooks
//! of the workload's processes on their futex words (`futex_waitv`), and
//! a new process or image waits stopped until weft reads the event ring:
//! a thread of weft's sleeps in `epoll` on the ring's descriptor and, at
//! each new event, bumps a word of its own that weft waits on with the
//! others, so neither kind of news waits for the other.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::thread::futex;

/// The thread, and the word it bumps.
#[derive(Debug)]
pub struct Wake {
    word: Arc<AtomicU32>,
    stop: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The epoll data of the event ring and of the descriptor that ends the thread.
const RING: u64 = 0;
const STOP: u64 = 1;

impl Wake {
    /// Starts the thread over `ring`, the event ring's descriptor, which
    /// it keeps a duplicate of.
    pub fn start(ring: BorrowedFd<'_>) -> std::io::Result<Wake> {
        let poll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let ring = ring.try_clone_to_owned()?;
        // Edge-triggered: one wake-up per batch of events the kernel
        // signals, not one loop per event still unread.
        epoll::add(
            &poll,
            &ring,
            epoll::EventData::new_u64(RING),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )?;
        let stop = eventfd(0, EventfdFlags::CLOEXEC)?;
        epoll::add(
            &poll,
            &stop,
            epoll::EventData::new_u64(STOP),
            epoll::EventFlags::IN,
        )?;
        let word = Arc::new(AtomicU32::new(0));
        let bumped = Arc::clone(&word);
        let thread = std::thread::Builder::new()
            .name("weft-follow".into())
            .spawn(move || {
                let _ring = ring;
                let mut events = [MaybeUninit::<epoll::Event>::uninit(); 2];
                loop {
                    let got = match epoll::wait(&poll, &mut events[..], None) {
                        Ok((got, _)) => got,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return,
                    };
                    if got.iter().any(|e| e.data.u64() == STOP) {
                        return;
                    }
                    bumped.fetch_add(1, Ordering::SeqCst);
                    let _ = futex::wake(&bumped, futex::Flags::PRIVATE, u32::MAX);
                }
            })?;
        Ok(Wake {
            word,
            stop,
            thread: Some(thread),
        })
    }

    /// The word bumped at each new event (a private futex of weft's).
    pub fn word(&self) -> &AtomicU32 {
        &self.word
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        let _ = rustix::io::write(self.stop.as_fd(), &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_readable_descriptor_bumps_the_word_and_dropping_ends_the_thread() {
        use std::io::Write;
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        let wake = Wake::start(reader.as_fd()).unwrap();
        assert_eq!(wake.word().load(Ordering::SeqCst), 0);
        writer.write_all(b"x").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while wake.word().load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the word was never bumped");
            let ts = futex::Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            let _ = futex::wait(wake.word(), futex::Flags::PRIVATE, 0, Some(&ts));
        }
        drop(wake);
    }
}
