//! `oxrdma iwarp-perf` between two processes on loopback: WRITE bandwidth (a number of
//! WRITEs, or for a time) and the 8 B ping-pong each finish over iWARP and report it; a
//! client with no server fails with a clear error.

mod common;
use common::{free_port, oxrdma, Reaped};

use std::process::Stdio;
use std::time::{Duration, Instant};

/// Server and client of `test` with `extra` arguments; the client's JSON report.
fn pair(test: &str, extra: &[&str]) -> serde_json::Value {
    let port = free_port();
    let server = oxrdma()
        .args([
            "iwarp-perf",
            test,
            "--bind",
            "127.0.0.1",
            "-p",
            &port,
            "--json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(Reaped::new)
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = oxrdma()
            .args(["iwarp-perf", test, "127.0.0.1", "-p", &port, "--json"])
            .args(extra)
            .output()
            .unwrap();
        if out.status.success() {
            break out;
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cannot reach") && Instant::now() < end,
            "client failed: {err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let server = server.into_child().wait_with_output().unwrap();
    assert!(
        server.status.success(),
        "server: {}",
        String::from_utf8_lossy(&server.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("")).unwrap()
}

#[test]
fn write_bandwidth_and_latency_over_iwarp() {
    let bw = pair("write-bw", &["-s", "65536", "-n", "2000"]);
    assert_eq!(bw["iterations"], 2000);
    assert!(bw["gbps"].as_f64().unwrap() > 0.0, "{bw}");
    let timed = pair("write-bw", &["-s", "4096", "-D", "0.3"]);
    assert!(timed["iterations"].as_u64().unwrap() > 0, "{timed}");
    assert!(timed["seconds"].as_f64().unwrap() >= 0.3, "{timed}");
    let lat = pair("write-lat", &["-n", "500"]);
    assert_eq!(lat["iterations"], 500);
    assert!(lat["half_rtt_us"].as_f64().unwrap() > 0.0, "{lat}");
}

#[test]
fn a_client_without_a_server_says_so() {
    let port = free_port();
    let out = oxrdma()
        .args(["iwarp-perf", "write-bw", "127.0.0.1", "-p", &port])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach the iwarp-perf server"), "{err}");
}
