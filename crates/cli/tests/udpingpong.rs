//! `oxrdma ud-pingpong` server and client as two processes on 127.0.0.81/.82, and its
//! errors.

mod common;
use common::{free_port, oxrdma};

use std::io::{Read, Write};
use std::process::{Output, Stdio};
use std::time::Duration;

/// Every test here opens devices on 127.0.0.81/.82: they take turns.
static ADDRS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ADDRS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The one error line of a failed run.
fn error_line(out: &Output) -> String {
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_string()
}

fn run_pair(size: usize, iters: u64) -> (String, String) {
    let port = free_port();
    let (s, n) = (size.to_string(), iters.to_string());
    let common = ["-p", port.as_str(), "-s", s.as_str(), "-n", n.as_str()];
    let server = oxrdma()
        .args(["ud-pingpong", "-d", "127.0.0.81"])
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Retry until the server listens.
    let mut client = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let out = oxrdma()
            .args(["ud-pingpong", "127.0.0.1", "-d", "127.0.0.82"])
            .args(common)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("cannot reach") {
            client = Some(out);
            break;
        }
    }
    let client = client.expect("the server never listened");
    let server = server.wait_with_output().unwrap();
    for (who, o) in [("client", &client), ("server", &server)] {
        assert!(
            o.status.success(),
            "{who}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    (
        String::from_utf8(server.stdout).unwrap(),
        String::from_utf8(client.stdout).unwrap(),
    )
}

#[test]
fn server_and_client_agree_on_every_size() {
    let _turn = turn();
    // 0 bytes is a legal datagram; 4096 is loopback's active MTU (interface MTU 65536).
    for (size, iters) in [(0, 50), (1, 200), (1024, 200), (4096, 100)] {
        let (server, client) = run_pair(size, iters);
        for (who, text, local, remote) in [
            ("server", &server, "127.0.0.81", "127.0.0.82"),
            ("client", &client, "127.0.0.82", "127.0.0.81"),
        ] {
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 4, "{who}: {text}");
            assert!(
                lines[0].starts_with("  local address:  LID 0x0000, QPN 0x")
                    && lines[0].ends_with(&format!(": GID ::ffff:{local}")),
                "{who}: {text}"
            );
            assert!(
                lines[1].starts_with("  remote address: LID 0x0000, QPN 0x")
                    && lines[1].ends_with(&format!(", GID ::ffff:{remote}")),
                "{who}: {text}"
            );
            let bytes = 2 * size as u64 * iters;
            assert!(
                lines[2].starts_with(&format!("{bytes} bytes in "))
                    && lines[2].ends_with(" Mbit/sec"),
                "{who}: {text}"
            );
            assert!(
                lines[3].starts_with(&format!("{iters} iters in "))
                    && lines[3].ends_with(" usec/iter"),
                "{who}: {text}"
            );
        }
        // Each side names the other's QPN and PSN.
        let qpn_psn = |l: &str| l[l.find("QPN").unwrap()..l.find(" GID").unwrap() - 1].to_string();
        let (s, c): (Vec<&str>, Vec<&str>) = (server.lines().collect(), client.lines().collect());
        assert_eq!(qpn_psn(s[0]), qpn_psn(c[1]));
        assert_eq!(qpn_psn(c[0]), qpn_psn(s[1]));
    }
}

#[test]
fn bad_arguments_are_one_clear_error() {
    let _turn = turn();
    let out = oxrdma()
        .args(["ud-pingpong", "-d", "127.0.0.81", "-s", "4097"])
        .output()
        .unwrap();
    assert!(
        error_line(&out).contains("requested size 4097 larger than the port's active MTU (4096)")
    );
    let out = oxrdma()
        .args(["ud-pingpong", "-d", "127.0.0.81", "-n", "0"])
        .output()
        .unwrap();
    assert!(error_line(&out).contains("-n > 0"));
    // No -e (event mode) here.
    let out = oxrdma().args(["ud-pingpong", "-e"]).output().unwrap();
    assert!(error_line(&out).contains("'-e'"));
    // Nobody listens on a port just released.
    let port = free_port();
    let out = oxrdma()
        .args(["ud-pingpong", "-d", "127.0.0.82", "-p", &port, "127.0.0.1"])
        .output()
        .unwrap();
    assert!(error_line(&out).contains(&format!("cannot reach 127.0.0.1:{port}")));
}

#[test]
fn a_peer_without_gid_is_refused() {
    let _turn = turn();
    // A fake ibv_ud_pingpong run without -g: LID:QPN:PSN and an all-zero GID.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut m = [0u8; 52];
        s.read_exact(&mut m).unwrap();
        s.write_all(b"0000:000014:533809:00000000000000000000000000000000\0")
            .unwrap();
    });
    let out = oxrdma()
        .args(["ud-pingpong", "-d", "127.0.0.82", "-p", &port, "127.0.0.1"])
        .output()
        .unwrap();
    fake.join().unwrap();
    assert!(error_line(&out).contains("peer sent no GID"));
}
