//! `CompletionQueue::wait`: a thread waiting for a completion that does not come costs
//! (next to) no CPU, and one that comes wakes it at once. Alone in its test binary: the
//! CPU of every thread of the process is counted.

mod common;

use common::{pair, process_cpu};
use oxrdma::SendWr;
use std::time::{Duration, Instant};

#[test]
fn a_thread_waiting_on_a_cq_costs_no_cpu_and_wakes_when_a_completion_comes() {
    let (a, b) = pair("127.0.0.217", "127.0.0.218");
    let remote = b.mr.remote();
    let write = |i| SendWr::write(i, [a.mr.sge(0, 8).unwrap()], remote).unwrap();
    // Traffic first, each completion waited for: the device is warm, a spin is tried.
    for i in 0..20 {
        a.qp.post_send(write(i)).unwrap();
        a.cq.wait_one(Duration::from_secs(10))
            .unwrap()
            .result()
            .unwrap();
    }
    // Nothing comes: a second's wait, timed out, costs next to no CPU.
    let (cpu, start) = (process_cpu(), Instant::now());
    let e = a.cq.wait_one(Duration::from_secs(1)).unwrap_err();
    let (used, wall) = (process_cpu() - cpu, start.elapsed());
    assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::TimedOut);
    assert!(wall >= Duration::from_secs(1), "{wall:?}");
    println!("idle wait: {used:?} of CPU in {wall:?} (both devices' engine threads too)");
    assert!(
        used < Duration::from_millis(20),
        "{used:?} of CPU in {wall:?} while idle"
    );
    // A completion that comes while it sleeps wakes it.
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            a.qp.post_send(write(99)).unwrap();
        });
        let start = Instant::now();
        let wc = a.cq.wait_one(Duration::from_secs(10)).unwrap();
        assert_eq!(wc.wr_id, 99);
        let late = start.elapsed();
        println!("woken {late:?} after the wait began (the WRITE went at 200 ms)");
        assert!(late < Duration::from_millis(1000), "{late:?}");
    });
}
