//! `oxrdma perf --perftest` against itself (two processes on loopback) and against a
//! misbehaving fake perftest peer. Devices are on 127.0.0.61-.69 (other tests use .2, .3
//! and .21-.59).

mod common;
use common::{free_port, oxrdma};

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|_| panic!("no JSON in {text:?}"))
}

/// Runs server and client of one test; returns both outputs.
fn pair(test: &str, server_args: &[&str], client_args: &[&str], dev: u8) -> (Output, Output) {
    let port = free_port();
    let common = |extra: &[&str], d: u8| {
        let mut c = oxrdma();
        c.args(["perf", test, "--perftest", "--json", "-p", &port, "-d"])
            .arg(format!("127.0.0.{d}"))
            .args(extra);
        c
    };
    let server = common(server_args, dev)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The server listens once it has bound; retry the client until then.
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = loop {
        let out = common(client_args, dev + 1)
            .arg("127.0.0.1")
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("cannot reach");
        if !refused || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (server.wait_with_output().unwrap(), client)
}

#[test]
fn every_perftest_test_runs_between_two_oxrdma_processes() {
    let cases: &[(&str, &str)] = &[
        ("write-bw", "4096"),
        ("read-bw", "1048576"),
        ("send-bw", "2"),
        ("atomic-bw", "8"),
        ("write-lat", "4096"),
    ];
    for &(test, size) in cases {
        let a = ["-s", size, "-n", "300"];
        let (s, c) = pair(test, &a, &a, 61);
        both_ran(test, (&s, &c), size, 300);
    }
}

/// Both sides of `what` exited 0 and printed a row of `size` bytes x `iters`.
fn both_ran(what: &str, (s, c): (&Output, &Output), size: &str, iters: u64) {
    for (who, out) in [("server", s), ("client", c)] {
        assert!(
            out.status.success(),
            "{what} {who}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = json(out);
        assert_eq!(r["bytes"], size.parse::<u64>().unwrap(), "{what} {who}");
        assert_eq!(r["iterations"], iters, "{what} {who}");
    }
}

#[test]
fn uc_and_ud_run_as_perftest_runs_them() {
    let cases: &[(&str, &str, &str)] = &[
        ("write-bw", "UC", "65536"),
        ("send-bw", "UC", "4096"),
        ("send-bw", "UD", "4096"),
        ("write-lat", "UC", "8"),
    ];
    for &(test, conn, size) in cases {
        let a = ["-c", conn, "-s", size, "-n", "300"];
        let (s, c) = pair(test, &a, &a, 68);
        both_ran(&format!("{test} -c {conn}"), (&s, &c), size, 300);
    }
    // A UD message is one packet: larger than the path MTU is refused up front.
    let a = ["-c", "UD", "-s", "8192", "-n", "10"];
    let (s, c) = pair("send-bw", &a, &a, 68);
    for out in [&s, &c] {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("a UD message is one packet"), "{err}");
    }
}

#[test]
fn a_bw_server_refuses_a_client_that_ran_another_size() {
    let (s, c) = pair(
        "write-bw",
        &["-s", "4096", "-n", "50"],
        &["-s", "2048", "-n", "50"],
        63,
    );
    assert!(c.status.success());
    assert_eq!(s.status.code(), Some(1));
    let err = String::from_utf8(s.stderr).unwrap();
    assert!(
        err.contains("the client ran 50 x 2048 B, this server -n 50 -s 4096"),
        "{err}"
    );
}

/// A fake perftest server that answers the preamble, then does `after` with the socket.
fn fake_server(
    version: &'static [u8],
    after: fn(&mut std::net::TcpStream),
) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut v = [0u8; 16];
        s.read_exact(&mut v).unwrap();
        let mut reply = [0u8; 16];
        reply[..version.len()].copy_from_slice(version);
        s.write_all(&reply).unwrap();
        if !version.starts_with(b"6.06") {
            return;
        }
        for (n, answer) in [
            (4usize, &[0u8, 0, 0x10, 0][..]),
            (4, &[0, 0, 0, 0x40]),
            (2, b"3\0"),
        ] {
            let mut b = vec![0u8; n];
            s.read_exact(&mut b).unwrap();
            s.write_all(answer).unwrap();
        }
        after(&mut s);
    });
    (port, t)
}

fn client_error(port: &str, dev: &str) -> String {
    let out = oxrdma()
        .args([
            "perf",
            "write-bw",
            "--perftest",
            "-n",
            "10",
            "-s",
            "64",
            "-p",
            port,
            "-d",
            dev,
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

#[test]
fn bad_peers_give_one_clear_error() {
    // Not a perftest version.
    let (port, t) = fake_server(b"hello", |_| {});
    let err = client_error(&port, "127.0.0.65");
    assert!(err.contains("where perftest sends its version"), "{err}");
    t.join().unwrap();
    // A KEYS message cut short, then the connection closed.
    let (port, t) = fake_server(b"6.06", |s| {
        let mut b = [0u8; 108];
        s.read_exact(&mut b).unwrap();
        s.write_all(&b[..50]).unwrap();
    });
    let err = client_error(&port, "127.0.0.66");
    assert!(
        err.contains("closed the connection during its KEYS (50 of 108 bytes)"),
        "{err}"
    );
    t.join().unwrap();
    // A whole KEYS message that does not parse.
    let (port, t) = fake_server(b"6.06", |s| {
        let mut b = [0u8; 108];
        s.read_exact(&mut b).unwrap();
        let mut bad = [0u8; 108];
        bad[..20].copy_from_slice(b"0000:0001:zz:000001:");
        s.write_all(&bad).unwrap();
    });
    let err = client_error(&port, "127.0.0.67");
    assert!(err.contains("malformed KEYS message"), "{err}");
    t.join().unwrap();
}
