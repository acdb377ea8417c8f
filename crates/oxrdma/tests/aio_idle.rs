//! A tokio task awaiting a completion that does not come costs (next to) no CPU. Alone in
//! its test binary: the CPU of every thread of the process is counted.
#![cfg(feature = "tokio")]

mod common;

use common::{pair, process_cpu};
use oxrdma::aio::AsyncCq;
use oxrdma::SendWr;
use std::time::{Duration, Instant};

#[test]
fn an_idle_awaiting_task_costs_no_cpu() {
    let (a, b) = pair("127.0.0.238", "127.0.0.239");
    let remote = b.mr.remote();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in = rt.enter();
    let cq = AsyncCq::new(a.cq).unwrap();
    rt.block_on(async {
        for i in 0..20 {
            let w = SendWr::write(i, [a.mr.sge(0, 8).unwrap()], remote).unwrap();
            a.qp.post_send(w).unwrap();
            cq.next().await.unwrap().result().unwrap();
        }
        let (cpu, start) = (process_cpu(), Instant::now());
        let r = tokio::time::timeout(Duration::from_secs(1), cq.next()).await;
        let (used, wall) = (process_cpu() - cpu, start.elapsed());
        assert!(r.is_err(), "a completion with nothing posted");
        println!("idle await: {used:?} of CPU in {wall:?} (both devices' engine threads too)");
        assert!(
            used < Duration::from_millis(20),
            "{used:?} of CPU in {wall:?}"
        );
    });
}
