//! `oxrdma path-emu` between two network namespaces the test makes (and deletes): UDP
//! datagrams from one to the other arrive after the one-way delay, in order, with about
//! the loss asked for, and the delay line's counts add up. Needs root and iproute2; where
//! namespaces cannot be made it says so and skips (and fails when `OXRDMA_CI` is set).

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// Deletes the namespaces when dropped.
struct Namespaces([String; 2]);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            ip(&["netns", "del", n]);
        }
    }
}

/// A UDP socket bound to `addr` inside namespace `ns`.
fn socket_in(ns: &str, addr: &str) -> UdpSocket {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns");
    let addr = addr.to_string();
    std::thread::spawn(move || {
        // SAFETY: moves this short-lived thread into the namespace we hold open.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns");
        UdpSocket::bind(addr).expect("bind")
    })
    .join()
    .unwrap()
}

#[test]
fn datagrams_cross_the_path_late_in_order_and_with_the_loss_asked_for() {
    let pid = std::process::id();
    let names = [format!("oxpe-a-{pid}"), format!("oxpe-b-{pid}")];
    if !(ip(&["netns", "add", &names[0]]) && ip(&["netns", "add", &names[1]])) {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "cannot make namespaces under CI"
        );
        eprintln!("SKIPPED: cannot make network namespaces (needs root)");
        return;
    }
    let ns = Namespaces(names);
    let mut emu = Command::new(env!("CARGO_BIN_EXE_oxrdma"))
        .args([
            "path-emu",
            "--netns",
            &ns.0[0],
            &ns.0[1],
            "--addrs",
            "10.98.0.1",
            "10.98.0.2",
        ])
        .args([
            "--delay-ms",
            "20",
            "--loss",
            "0.3",
            "--seed",
            "7",
            "--rate-mbit",
            "100",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("path-emu");
    let mut out = BufReader::new(emu.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("\"ready\":true"), "{line}");
    let rx = socket_in(&ns.0[1], "10.98.0.2:9000");
    let tx = socket_in(&ns.0[0], "10.98.0.1:9000");
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let n = 400u32;
    let start = Instant::now();
    for i in 0..n {
        tx.send_to(&i.to_be_bytes(), "10.98.0.2:9000").unwrap();
    }
    let mut got = Vec::new();
    let mut first = None;
    let mut b = [0u8; 16];
    while let Ok(k) = rx.recv(&mut b) {
        first.get_or_insert(start.elapsed());
        assert_eq!(k, 4);
        got.push(u32::from_be_bytes(b[..4].try_into().unwrap()));
    }
    let first = first.expect("nothing crossed the path");
    assert!(
        first >= Duration::from_millis(20),
        "first datagram after {first:?}"
    );
    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
    // 30 % loss of 400: 280 expected, the binomial's sd is 9.
    assert!(
        (240..=320).contains(&got.len()),
        "{} of {n} arrived",
        got.len()
    );
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(emu.id() as i32, libc::SIGTERM) };
    let mut stats = String::new();
    out.read_line(&mut stats).unwrap();
    emu.wait().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    let (fwd, lost) = (&v["a_to_b"]["forwarded"], &v["a_to_b"]["lost"]);
    let (fwd, lost) = (fwd.as_u64().unwrap(), lost.as_u64().unwrap());
    // The kernel may send a packet or two of its own (IPv6 on link up) besides ours.
    assert!(
        fwd >= got.len() as u64 && fwd + lost >= u64::from(n),
        "{stats}"
    );
    assert!(fwd + lost < u64::from(n) + 20, "{stats}");
}
