//! A thread sleeping on a completion channel costs (next to) no CPU while nothing comes.
//! Alone in its test binary: the CPU of every thread of the process is counted.

mod common;

use common::{pair, process_cpu};
use oxrdma::{SendData, SendWr, WrOpcode};
use std::time::{Duration, Instant};

#[test]
fn an_idle_waiter_costs_no_cpu() {
    let (a, b) = pair("127.0.0.105", "127.0.0.106");
    let (ca, qa, ch, mr) = (&a.cq, &a.qp, &a.ch, &b.mr);
    // Some traffic first, each completion waited for on the channel, so the device has
    // been busy and its waiter quick (a spin is then tried).
    for i in 0..20 {
        ca.req_notify(ch).unwrap();
        let mut w = SendWr::new(i, WrOpcode::RdmaWrite, SendData::Inline(vec![7; 8].into()));
        (w.remote_addr, w.rkey) = (mr.addr(), mr.rkey());
        qa.post_send(w).unwrap();
        assert!(
            ch.wait(Duration::from_secs(10)).unwrap(),
            "WRITE {i}: no event"
        );
        let mut wcs = Vec::new();
        assert_eq!(ca.poll(&mut wcs, 4).unwrap(), 1);
    }
    // Then nothing, for a second, a thread sleeping on the armed CQ's channel.
    ca.req_notify(ch).unwrap();
    let (cpu, start) = (process_cpu(), Instant::now());
    assert!(
        !ch.wait(Duration::from_secs(1)).unwrap(),
        "an event with nothing posted"
    );
    let (used, wall) = (process_cpu() - cpu, start.elapsed());
    println!("idle waiter: {used:?} of CPU in {wall:?} (both devices' engine threads too)");
    assert!(
        used < Duration::from_millis(20),
        "{used:?} of CPU in {wall:?} while idle"
    );
}
