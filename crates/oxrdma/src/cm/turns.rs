//! The order an iWARP listener shows its requests in: that of their connections. Each
//! request is read on a thread of its own (a slow peer holds up no other), and threads
//! woken together run in any order; programs that pair connections by their order
//! (perftest `-R -q N` numbers its QPs by the order of `CONNECT_REQUEST`s and its peer's
//! by the order of its `rdma_connect`s) need the kernel's order, which is the requests'.
//! So a request waits for those accepted before it, for at most [`WAIT`]: one that has not
//! come by then (a slow or silent peer) loses its turn, and the rest go on without it.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a request waits for those before it: requests made one after the other come
/// microseconds apart, but on a busy host a thread may wait milliseconds for a core
/// (perftest -R -q 8 on two cores busy-polling: 1 run in 8 out of order with 5 ms).
pub const WAIT: Duration = Duration::from_millis(50);

/// Turns by number, in the order of `take`.
#[derive(Debug, Default)]
pub struct Turns {
    st: Mutex<State>,
    moved: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The next number `take` gives.
    next: u64,
    /// The turn now: every number below it is done or gave up waiting for.
    now: u64,
    /// Numbers done ahead of `now`.
    ahead: Vec<u64>,
}

impl Turns {
    /// A number for the connection just accepted.
    pub fn take(&self) -> u64 {
        let mut st = self.st.lock().unwrap_or_else(PoisonError::into_inner);
        st.next += 1;
        st.next - 1
    }

    /// Waits until it is `n`'s turn, or `wait` has passed: then every turn before `n`
    /// still open is given up (their requests go when they come, out of turn).
    pub fn wait_for(&self, n: u64, wait: Duration) {
        let until = Instant::now() + wait;
        let mut st = self.st.lock().unwrap_or_else(PoisonError::into_inner);
        while st.now < n {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.now = n;
                st.ahead.retain(|&a| a > n);
                break;
            }
            st = self
                .moved
                .wait_timeout(st, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// `n` is done (its request shown, or it failed): the turn moves past it.
    pub fn done(&self, n: u64) {
        let mut st = self.st.lock().unwrap_or_else(PoisonError::into_inner);
        if n < st.now {
            return; // its turn was given up
        }
        st.ahead.push(n);
        while let Some(i) = st.ahead.iter().position(|&a| a == st.now) {
            st.ahead.swap_remove(i);
            st.now += 1;
        }
        drop(st);
        self.moved.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Requests done in any order are shown in the order of their numbers.
    #[test]
    fn requests_go_in_the_order_of_their_connections() {
        for round in 0..20u64 {
            let turns = Arc::new(Turns::default());
            let shown = Arc::new(Mutex::new(Vec::new()));
            let numbers: Vec<u64> = (0..6).map(|_| turns.take()).collect();
            let threads: Vec<_> = numbers
                .iter()
                .rev()
                .map(|&n| {
                    let (turns, shown) = (turns.clone(), shown.clone());
                    std::thread::spawn(move || {
                        // Later numbers arrive first, each a little after the one before.
                        std::thread::sleep(Duration::from_micros(100 * (6 - n) + round));
                        turns.wait_for(n, Duration::from_secs(5));
                        shown.lock().unwrap().push(n);
                        turns.done(n);
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(*shown.lock().unwrap(), numbers, "round {round}");
        }
    }

    /// A turn that never comes is given up after the wait, and only once: the rest go on
    /// in order, and the late one goes when it comes.
    #[test]
    fn a_silent_connection_loses_its_turn_and_holds_up_nobody_after() {
        let turns = Turns::default();
        let (silent, a, b) = (turns.take(), turns.take(), turns.take());
        let began = Instant::now();
        turns.wait_for(a, Duration::from_millis(20));
        let waited = began.elapsed();
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        turns.done(a);
        let began = Instant::now();
        turns.wait_for(b, Duration::from_secs(5));
        assert!(
            began.elapsed() < Duration::from_millis(5),
            "b waited for the silent one"
        );
        turns.done(b);
        // The silent one, late: shown at once, and the turn stays where it is.
        let began = Instant::now();
        turns.wait_for(silent, Duration::from_secs(5));
        assert!(began.elapsed() < Duration::from_millis(5));
        turns.done(silent);
        let next = turns.take();
        let began = Instant::now();
        turns.wait_for(next, Duration::from_secs(5));
        assert!(
            began.elapsed() < Duration::from_millis(5),
            "the next waited"
        );
    }
}
