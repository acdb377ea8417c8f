//! `OXRDMA_TURNAROUND=1`: how long a thread spends in user space between a receive that
//! brought packets and its next send (in a ping-pong, from the peer's message to the
//! answer), and how long those two system calls take. A ping-pong's half round trip is
//! the kernel's part (the send and the receive, which a raw UDP ping-pong pays too) plus
//! this turnaround; `bench/turnaround.sh` sets one against the other. Each thread prints
//! a line on stderr per `EVERY` turnarounds. Off, it costs a load of a flag per call.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::Instant;

/// Turnarounds per printed line.
const EVERY: usize = 10_000;

/// What one thread has measured since its last line.
#[derive(Default)]
struct Samples {
    /// When the last receive that brought packets returned (None: sent since).
    received_at: Option<Instant>,
    /// Nanoseconds from such a receive to the next send.
    turnaround: Vec<u64>,
    /// Nanoseconds in each receive call that brought packets, and in each send call.
    recv: Vec<u64>,
    send: Vec<u64>,
}

thread_local! {
    static SAMPLES: RefCell<Samples> = RefCell::new(Samples::default());
}

/// Whether `OXRDMA_TURNAROUND=1` (read once).
pub(crate) fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXRDMA_TURNAROUND").is_ok_and(|v| v == "1"))
}

/// The clock before a system call, if measuring.
pub(crate) fn start() -> Option<Instant> {
    on().then(Instant::now)
}

/// A receive that began at `began` (from [`start`]) returned `packets` messages.
pub(crate) fn received(began: Option<Instant>, packets: isize) {
    let Some(began) = began else { return };
    if packets <= 0 {
        return;
    }
    let now = Instant::now();
    SAMPLES.with(|s| {
        let mut s = s.borrow_mut();
        s.recv.push(nanos(now - began));
        s.received_at = Some(now);
    });
}

/// A send is about to be made (at `began`, from [`start`]).
pub(crate) fn sending(began: Option<Instant>) {
    let Some(began) = began else { return };
    SAMPLES.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(at) = s.received_at.take() {
            s.turnaround.push(nanos(began - at));
        }
    });
}

/// The send that began at `began` returned.
pub(crate) fn sent(began: Option<Instant>) {
    let Some(began) = began else { return };
    let took = nanos(began.elapsed());
    SAMPLES.with(|s| {
        let mut s = s.borrow_mut();
        s.send.push(took);
        if s.turnaround.len() >= EVERY {
            let line = report(&mut s);
            let thread = std::thread::current();
            eprintln!("turnaround {}: {line}", thread.name().unwrap_or("?"));
        }
    });
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The line for what `s` holds (emptied): each figure's 10th, 50th and 90th percentile.
fn report(s: &mut Samples) -> String {
    let n = s.turnaround.len();
    let [t, r, w] = [&mut s.turnaround, &mut s.recv, &mut s.send].map(|v| {
        let p = percentiles(v);
        v.clear();
        p
    });
    format!(
        "{n} turnarounds: receive to send p50 {} ns (p10 {}, p90 {}); \
         receive call p50 {} ns; send call p50 {} ns",
        t[1], t[0], t[2], r[1], w[1]
    )
}

/// The 10th, 50th and 90th percentile of `v` (sorted here); zeros when empty.
fn percentiles(v: &mut [u64]) -> [u64; 3] {
    if v.is_empty() {
        return [0; 3];
    }
    v.sort_unstable();
    [10, 50, 90].map(|p| v[(v.len() - 1) * p / 100])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_sample_and_of_none() {
        let mut v: Vec<u64> = (1..=101).rev().collect();
        assert_eq!(percentiles(&mut v), [11, 51, 91]);
        assert_eq!(percentiles(&mut []), [0, 0, 0]);
    }

    #[test]
    fn a_turnaround_runs_from_a_receive_with_packets_to_the_next_send() {
        let t0 = Instant::now();
        received(Some(t0), 0); // nothing arrived: no turnaround starts
        sending(Some(Instant::now()));
        received(Some(t0), 2);
        let before = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        sending(Some(Instant::now()));
        sending(Some(Instant::now())); // a second send answers nothing
        SAMPLES.with(|s| {
            let mut s = s.borrow_mut();
            assert_eq!((s.turnaround.len(), s.recv.len()), (1, 1));
            assert!(s.turnaround[0] >= 2_000_000);
            assert!(s.turnaround[0] <= nanos(before.elapsed()) + nanos(before - t0));
            let line = report(&mut s);
            assert!(
                line.starts_with("1 turnarounds: receive to send p50 "),
                "{line}"
            );
            assert!(s.turnaround.is_empty() && s.recv.is_empty());
        });
    }
}
