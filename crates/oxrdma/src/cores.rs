//! Whether a core is free for the engine thread to keep polling on (`nic.rs`).
//!
//! The kernel's count of runnable threads (`/proc/loadavg`, fourth field, this thread
//! among them) against the cores this process may use. Read at most once per `EVERY`: a
//! read costs a few microseconds, and the answer only steers how long to poll.

use std::fs::File;
use std::time::{Duration, Instant};

/// How long an answer stands.
const EVERY: Duration = Duration::from_millis(1);

#[derive(Debug)]
pub(crate) struct Cores {
    /// `/proc/loadavg`, kept open (None where there is none: then no core is free).
    loadavg: Option<File>,
    cores: usize,
    /// The last answer and when it was read.
    free: bool,
    read_at: Option<Instant>,
}

impl Cores {
    pub fn new() -> Cores {
        Cores {
            loadavg: File::open("/proc/loadavg").ok(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            free: false,
            read_at: None,
        }
    }

    /// Whether this process may run on one core only (a thread that spins there holds
    /// up every other thread of the host pinned to it).
    pub fn alone(&self) -> bool {
        self.cores == 1
    }

    /// Whether no more threads are runnable than there are cores, counting the caller.
    pub fn free(&mut self) -> bool {
        if self.read_at.is_some_and(|t| t.elapsed() < EVERY) {
            return self.free;
        }
        self.read_at = Some(Instant::now());
        self.free = self.running().is_some_and(|r| r <= self.cores);
        self.free
    }

    /// Threads runnable now, by the kernel's count.
    fn running(&self) -> Option<usize> {
        let mut buf = [0u8; 128];
        let n = rustix::io::pread(self.loadavg.as_ref()?, &mut buf, 0).ok()?;
        parse_running(&buf[..n])
    }
}

/// The runnable count of a `/proc/loadavg` line ("0.52 0.58 0.59 2/467 12345").
fn parse_running(line: &[u8]) -> Option<usize> {
    let line = std::str::from_utf8(line).ok()?;
    let field = line.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_runnable_count() {
        assert_eq!(parse_running(b"0.52 0.58 0.59 2/467 12345\n"), Some(2));
        assert_eq!(parse_running(b"0.00 0.01 0.05 13/80 9"), Some(13));
        assert_eq!(parse_running(b"0.52 0.58 0.59"), None);
        assert_eq!(parse_running(b"0.52 0.58 0.59 x/467 1"), None);
        assert_eq!(parse_running(b""), None);
    }

    #[test]
    fn this_thread_counts_itself() {
        // The reader is running while it reads.
        assert!(Cores::new().running().is_some_and(|r| r >= 1));
    }
}
