//! A program that stops calling the library leaves its device to the engine thread: a
//! peer's READ is answered within a few milliseconds, however the program waited before
//! (busy-polling its CQ, or sleeping on its completion channel), even when it began just
//! after the device opened, while the engine thread was in its longest sleep. The thread
//! simulator found the case (`oxrdma-sim`'s `tests/threads.rs`,
//! `mixed_programs_keep_the_bounds`): a READ waited ~47 ms, the rest of that sleep, as
//! the polling test here did on the real stack before the fix (46.5 ms). The simulator's
//! event-sleeping case did not happen here (a first `req_notify` rings the engine
//! thread); its test guards it. Alone in its test binary: the timings must not share the
//! cores with other tests.

mod common;

use common::{pair, wait, Side};
use oxrdma::{SendData, SendWr, WcStatus, WrOpcode};
use std::time::{Duration, Instant};

fn write_8(from: &Side, to: &Side, id: u64) {
    let mut w = SendWr::new(id, WrOpcode::RdmaWrite, SendData::Inline(vec![7; 8].into()));
    (w.remote_addr, w.rkey) = (to.mr.addr(), to.mr.rkey());
    from.qp.post_send(w).unwrap();
}

/// `b` READs 8 bytes of `a`'s region and polls for it: how long it took.
fn read_from(b: &Side, a: &Side) -> Duration {
    let mut r = SendWr::new(
        99,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![b.mr.sge(0, 8).unwrap()].into()),
    );
    (r.remote_addr, r.rkey) = (a.mr.addr(), a.mr.rkey());
    let start = Instant::now();
    b.qp.post_send(r).unwrap();
    let wc = wait(&b.cq, 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    start.elapsed()
}

/// The slowest of `b`'s READs right after `a` stopped, over fresh devices; `a` waits for
/// 200 WRITEs as `waits` says first.
fn slowest_read(waits: impl Fn(&Side, &Side, u64), base: u8) -> Duration {
    (0..4u8)
        .map(|i| {
            let ip = |n: u8| format!("127.0.{}.{}", 110 + base, 10 + 2 * i + n);
            let (a, b) = pair(&ip(0), &ip(1));
            for id in 0..200 {
                waits(&a, &b, id);
            }
            // `a` calls in no more.
            read_from(&b, &a)
        })
        .max()
        .unwrap()
}

/// Past a few of the engine thread's looks (`RECHECK` 1 ms and 4 ms of timer slack),
/// well below its longest sleep (50 ms).
const BOUND: Duration = Duration::from_millis(20);

#[test]
fn a_program_that_polled_and_stopped_leaves_its_peer_s_reads_to_the_engine_thread() {
    let worst = slowest_read(
        |a, b, id| {
            write_8(a, b, id);
            wait(&a.cq, 1);
        },
        0,
    );
    println!("slowest READ after a polling program stopped: {worst:?}");
    assert!(worst < BOUND, "{worst:?}");
}

#[test]
fn a_program_that_slept_on_events_and_stopped_leaves_its_peer_s_reads_to_the_engine_thread() {
    let worst = slowest_read(
        |a, b, id| {
            a.cq.req_notify(&a.ch).unwrap();
            write_8(a, b, id);
            assert!(a.ch.wait(Duration::from_secs(10)).unwrap(), "no event");
            assert_eq!(wait(&a.cq, 1)[0].status, WcStatus::Success);
        },
        1,
    );
    println!("slowest READ after a program sleeping on events stopped: {worst:?}");
    assert!(worst < BOUND, "{worst:?}");
}
