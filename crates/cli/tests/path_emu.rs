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

/// Two namespaces joined by `oxrdma path-emu` with `args` (addresses 10.98.0.1 and .2);
/// None where namespaces cannot be made (not root).
fn path(
    tag: &str,
    args: &[&str],
) -> Option<(
    Namespaces,
    std::process::Child,
    BufReader<std::process::ChildStdout>,
)> {
    let pid = std::process::id();
    let names = [format!("oxpe{tag}a-{pid}"), format!("oxpe{tag}b-{pid}")];
    if !(ip(&["netns", "add", &names[0]]) && ip(&["netns", "add", &names[1]])) {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "cannot make namespaces under CI"
        );
        eprintln!("SKIPPED: cannot make network namespaces (needs root)");
        return None;
    }
    let ns = Namespaces(names);
    let mut emu = Command::new(env!("CARGO_BIN_EXE_oxrdma"))
        .args(["path-emu", "--netns", &ns.0[0], &ns.0[1]])
        .args(["--addrs", "10.98.0.1", "10.98.0.2"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("path-emu");
    let mut out = BufReader::new(emu.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("\"ready\":true"), "{line}");
    Some((ns, emu, out))
}

/// Stops path-emu and returns its counters.
fn stop(
    mut emu: std::process::Child,
    mut out: BufReader<std::process::ChildStdout>,
) -> serde_json::Value {
    // SAFETY: a signal to the child we started.
    unsafe { libc::kill(emu.id() as i32, libc::SIGTERM) };
    let mut stats = String::new();
    out.read_line(&mut stats).unwrap();
    emu.wait().unwrap();
    serde_json::from_str(&stats).expect("stats JSON")
}

#[test]
fn datagrams_cross_the_path_late_in_order_and_with_the_loss_asked_for() {
    let args = [
        "--delay-ms",
        "20",
        "--loss",
        "0.3",
        "--seed",
        "7",
        "--rate-mbit",
        "100",
    ];
    let Some((ns, emu, out)) = path("l", &args) else {
        return;
    };
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
    let v = stop(emu, out);
    let stats = v.to_string();
    let (fwd, lost) = (&v["a_to_b"]["forwarded"], &v["a_to_b"]["lost"]);
    let (fwd, lost) = (fwd.as_u64().unwrap(), lost.as_u64().unwrap());
    // The kernel may send a packet or two of its own (IPv6 on link up) besides ours.
    assert!(
        fwd >= got.len() as u64 && fwd + lost >= u64::from(n),
        "{stats}"
    );
    assert!(fwd + lost < u64::from(n) + 20, "{stats}");
}

/// The next datagram's first byte and its IP TOS byte (the socket asked for it).
fn recv_with_tos(s: &UdpSocket) -> Option<(u8, u8)> {
    let (mut data, mut control) = ([0u8; 64], [0u64; 8]);
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: all-zero bytes are a valid msghdr.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    (h.msg_iov, h.msg_iovlen) = (&raw mut iov, 1);
    h.msg_control = control.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `h` points at `iov`, `data` and `control`, alive for the call.
    if unsafe { libc::recvmsg(s.as_raw_fd(), &raw mut h, 0) } <= 0 {
        return None;
    }
    // SAFETY: the kernel filled `control` up to `msg_controllen`.
    let c = unsafe { libc::CMSG_FIRSTHDR(&raw const h) };
    assert!(!c.is_null(), "no TOS control message");
    // SAFETY: the one control message asked for, IP_TOS, carries one byte.
    let tos = unsafe { libc::CMSG_DATA(c).read() };
    Some((data[0], tos))
}

#[test]
fn past_the_aqm_threshold_ecn_capable_packets_are_marked_others_dropped_and_some_are_overtaken() {
    let args = [
        "--delay-ms",
        "5",
        "--rate-mbit",
        "10",
        "--queue-ms",
        "500",
        "--ecn-ms",
        "2",
        "--reorder",
        "0.2",
    ];
    let Some((ns, emu, out)) = path("e", &args) else {
        return;
    };
    let rx = socket_in(&ns.0[1], "10.98.0.2:9000");
    let tx = socket_in(&ns.0[0], "10.98.0.1:9000");
    rustix::net::sockopt::set_ip_recvtos(&rx, true).unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // 200 packets of 1000 bytes at 10 Mbit/s: 0.8 ms each, so the queue passes 2 ms at
    // the fourth. Even ones ECN-capable (marked past it), odd ones not (dropped past it).
    for i in 0..200u8 {
        rustix::net::sockopt::set_ip_tos(&tx, if i % 2 == 0 { 0b10 } else { 0 }).unwrap();
        let mut p = [0u8; 1000];
        p[0] = i;
        tx.send_to(&p, "10.98.0.2:9000").unwrap();
    }
    let mut got = Vec::new();
    while let Some(d) = recv_with_tos(&rx) {
        got.push(d);
    }
    let v = stop(emu, out);
    let dropped = v["a_to_b"]["aqm_drops"].as_u64().unwrap_or(0);
    assert_eq!(got.len() as u64 + dropped, 200, "{v}");
    assert!(dropped > 50, "{v}");
    let ce = got.iter().filter(|(_, t)| t & 0b11 == 0b11).count() as u64;
    assert!(ce > 50, "{ce} marked CE: {v}");
    assert_eq!(v["a_to_b"]["ce_marked"].as_u64(), Some(ce), "{v}");
    assert!(
        got.iter().all(|&(i, t)| i % 2 == 0 || t & 0b11 == 0),
        "a packet that is not ECN-capable is never marked"
    );
    let late = got.windows(2).filter(|w| w[1].0 < w[0].0).count();
    assert!(
        late > 0 && v["a_to_b"]["reordered"].as_u64() > Some(0),
        "{v}"
    );
}
