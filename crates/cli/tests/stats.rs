//! `oxrdma stats` from another process: it finds this test's devices by their files, shows
//! the counters their traffic moved (table, JSON, Prometheus, with rates under --watch),
//! forgets a device once it closes, and refuses bad flags with a clear error.

mod common;
use common::oxrdma;

use oxrdma::{Access, ConnectOptions, Context, QpCap, QpType, SendData, SendWr, WrOpcode};
use std::time::{Duration, Instant};

/// `oxrdma stats ARGS` for this process's devices: its stdout, after checking it succeeded.
fn stats(args: &[&str]) -> String {
    let out = oxrdma()
        .arg("stats")
        .args(["--pid", &std::process::id().to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The JSON lines of this process's devices, once one shows `want` WRITE packets sent
/// (a retransmission or a tail-loss probe sends one again).
fn json_once(want: u64) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<serde_json::Value> = stats(&["--json"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if lines
            .iter()
            .any(|d| d["counters"]["sent_write"].as_u64() >= Some(want))
        {
            return lines;
        }
        assert!(Instant::now() < deadline, "never showed {want}: {lines:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn another_process_reads_every_device_s_counters() {
    let a = Context::open("127.0.0.121".parse().unwrap()).unwrap();
    let b = Context::open("127.0.0.122".parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc, QpCap::default())
        .unwrap();
    qa.connect(&qb.endpoint(), &ConnectOptions::default())
        .unwrap();
    qb.connect(&qa.endpoint(), &ConnectOptions::default())
        .unwrap();
    let mr = pb.register(4096, Access::ALL).unwrap();
    for i in 0..25 {
        let mut w = SendWr::new(i, WrOpcode::RdmaWrite, SendData::Inline(vec![1; 8].into()));
        (w.remote_addr, w.rkey) = (mr.addr(), mr.rkey() ^ u32::from(i == 24));
        qa.post_send(w).unwrap();
    }
    // The last WRITE's rkey is wrong: the QP goes to ERR after a NAK.
    let deadline = Instant::now() + Duration::from_secs(10);
    while qa.counters().unwrap()[oxrdma::Counter::ReqRemoteAccessErrors] == 0 {
        assert!(Instant::now() < deadline, "{:?}", qa.counters());
        let _ = ca.poll(&mut Vec::new(), 64);
        std::thread::sleep(Duration::from_millis(5));
    }
    // What is in flight lands; then the counters stand still (the QP is in ERR), and the
    // other process must read what the API reads.
    std::thread::sleep(Duration::from_millis(100));
    let rcvd = b.counters()[oxrdma::Counter::RcvdWrite];
    assert!(rcvd >= 25, "{rcvd} WRITE packets received");
    let lines = json_once(25);
    let of = |ip: &str| {
        lines
            .iter()
            .find(|d| d["address"] == ip)
            .unwrap_or_else(|| panic!("{ip} not in {lines:?}"))
    };
    let (da, db) = (of("127.0.0.121"), of("127.0.0.122"));
    assert_eq!(da["pid"], std::process::id());
    assert_eq!(da["counters"]["req_remote_access_errors"], 1, "{da}");
    assert_eq!(db["counters"]["rcvd_write"], rcvd, "{db}");
    assert_eq!(db["counters"]["resp_remote_access_errors"], 1, "{db}");
    assert_eq!(db["counters"]["resp_bad_rkey"], 1, "{db}");
    // The same in the API.
    assert_eq!(b.counters()[oxrdma::Counter::BadRkey], 1);

    let table = stats(&[]);
    assert!(table.contains("nic-127.0.0.121 (process"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with("resp_bad_rkey") && l.trim_end().ends_with(" 1")),
        "{table}"
    );
    let prom = stats(&["--prometheus"]);
    assert_eq!(
        prom.matches("# TYPE oxrdma_sent_pkts_total counter")
            .count(),
        1,
        "{prom}"
    );
    assert!(
        prom.contains("oxrdma_rcvd_write_total{device=\"nic-127.0.0.122\",pid=")
            && prom.contains(&format!("address=\"127.0.0.122\"}} {rcvd}")),
        "{prom}"
    );
    // Rates: two rounds, the second with a rate per counter.
    let watch = stats(&[
        "--json",
        "--watch",
        "0.2",
        "--count",
        "2",
        "--address",
        "127.0.0.122",
    ]);
    let rounds: Vec<serde_json::Value> = watch
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rounds.len(), 2, "{watch}");
    assert!(rounds[0].get("per_second").is_none());
    assert_eq!(rounds[1]["per_second"]["rcvd_write"], 0.0, "{watch}");

    // Closed: gone from the list.
    drop((qa, qb, mr, ca, cb, pa, pb, b));
    let lines: Vec<String> = stats(&["--json"]).lines().map(String::from).collect();
    assert!(
        lines.iter().all(|l| !l.contains("127.0.0.122")),
        "{lines:?}"
    );
    drop(a);
}

#[test]
fn bad_flags_are_refused_with_a_reason() {
    for args in [
        &["--watch", "0"][..],
        &["--watch", "-1"],
        &["--watch", "soon"],
        &["--count", "2"],
        &["--json", "--prometheus"],
        &["--pid", "x"],
    ] {
        let out = oxrdma().arg("stats").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}
