//! RC over IPv4 and IPv6 between two network namespaces joined by a veth pair (the test creates both and
//! deletes them afterwards; all traffic stays inside them). Needs root and iproute2; where
//! namespaces cannot be created it says so and skips (and fails when `OXRDMA_CI` is set).

use oxrdma::{
    Access, ConnectOptions, Context, Mtu, QpCap, QpType, SendData, SendWr, WcStatus, WrOpcode,
};
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Deletes the namespaces it names when dropped.
struct Namespaces(Vec<String>);

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            ip(&["netns", "del", n]);
        }
    }
}

/// Runs `f` in a thread inside namespace `ns`: what it opens (sockets) stays there.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let file = std::fs::File::open(format!("/var/run/netns/{ns}")).expect("netns file");
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        f()
    })
    .join()
    .unwrap()
}

/// Opens a device from inside namespace `ns` (its socket stays there).
fn open_in(ns: &str, addr: &str) -> Context {
    let addr = addr.parse().unwrap();
    in_ns(ns, move || {
        Context::open(addr).expect("open device in namespace")
    })
}

/// Whether a UDP datagram from `from` in namespace `na` reaches `to` in `nb` within a
/// second (the project's own probe: a minimal machine has no ping).
fn udp_reaches(na: &str, from: &str, nb: &str, to: &str) -> bool {
    use std::net::{IpAddr, SocketAddr, UdpSocket};
    let (from, to): (IpAddr, IpAddr) = (from.parse().unwrap(), to.parse().unwrap());
    let rx = in_ns(nb, move || UdpSocket::bind(SocketAddr::new(to, 0)));
    let tx = in_ns(na, move || UdpSocket::bind(SocketAddr::new(from, 0)));
    let (Ok(rx), Ok(tx)) = (rx, tx) else {
        return false;
    };
    let dst = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let _ = tx.send_to(b"probe", dst);
        let mut b = [0u8; 8];
        if matches!(rx.recv_from(&mut b), Ok((5, _))) {
            return true;
        }
    }
    false
}

/// Two hosts: namespaces `<tag>a` and `<tag>b` joined by veth `oxva`/`oxvb`, with
/// 10.199.0.1/24 and fd99::1/64 on one, .2 and ::2 on the other, ready to carry IPv6.
/// None (after saying so) where namespaces cannot be made.
fn two_hosts(test: &str, tag: &str) -> Option<(Namespaces, String, String)> {
    let tag = format!("oxr{}{tag}", std::process::id());
    let (na, nb) = (format!("{tag}a"), format!("{tag}b"));
    if !ip(&["netns", "add", &na]) {
        assert!(
            std::env::var_os("OXRDMA_CI").is_none(),
            "cannot create a network namespace (CI must run as root)"
        );
        // Past the harness, which hides what a passing test prints: a skip must show.
        let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("SKIPPED {test}: cannot create a network namespace here (needs root and iproute2)\n"));
        return None;
    }
    let guard = Namespaces(vec![na.clone(), nb.clone()]);
    assert!(ip(&["netns", "add", &nb]));
    assert!(ip(&[
        "link", "add", "oxva", "netns", &na, "type", "veth", "peer", "name", "oxvb", "netns", &nb
    ]));
    for (ns, dev, v4, v6) in [
        (&na, "oxva", "10.199.0.1/24", "fd99::1/64"),
        (&nb, "oxvb", "10.199.0.2/24", "fd99::2/64"),
    ] {
        assert!(ip(&["-n", ns, "addr", "add", v4, "dev", dev]));
        // nodad: the address is usable (bindable) at once.
        assert!(ip(&["-n", ns, "addr", "add", v6, "dev", dev, "nodad"]));
        // Nor the link-local address the kernel adds when the link comes up (a GID).
        let knob = format!("/proc/sys/net/ipv6/conf/{dev}/accept_dad");
        in_ns(ns, move || std::fs::write(knob, "0")).expect("accept_dad");
        assert!(ip(&["-n", ns, "link", "set", dev, "up"]));
        assert!(ip(&["-n", ns, "link", "set", "lo", "up"]));
    }
    // A fresh IPv6 link needs a moment (link-local address, neighbour discovery) before it
    // carries anything; RC's retry budget (half a second here) is shorter than that.
    let ready = (0..10).any(|_| udp_reaches(&na, "fd99::1", &nb, "fd99::2"));
    assert!(ready, "the IPv6 link between the namespaces never came up");
    Some((guard, na, nb))
}

#[test]
fn rc_between_two_network_namespaces() {
    let Some((_guard, na, nb)) = two_hosts("rc_between_two_network_namespaces", "") else {
        return;
    };
    for (x, y) in [("10.199.0.1", "10.199.0.2"), ("fd99::1", "fd99::2")] {
        let a = open_in(&na, x);
        let b = open_in(&nb, y);
        // veth MTU 1500: active MTU 1024, as rxe derives it for a 1500-byte netdev.
        assert_eq!(a.active_mtu(), Mtu::Mtu1024, "{x}");
        transfer(&a, &b, None, x);
    }
}

/// A device on each host's interface, as `rdma link add rxe0 type rxe netdev IF` gives:
/// its GID table is the interface's addresses in rxe's order (the default link-local GID
/// made from the MAC address, the IPv4 address, the IPv6 one), and a QP sends from
/// whichever of them it is told: RC between the hosts from each GID in turn, link-local
/// included, and UD from the IPv6 one.
#[test]
fn devices_on_interfaces_send_from_each_gid_of_the_table() {
    let Some((_guard, na, nb)) = two_hosts("devices_on_interfaces_send_from_each_gid", "i") else {
        return;
    };
    let a = in_ns(&na, || {
        Context::open_interface("oxva").expect("device on oxva")
    });
    let b = in_ns(&nb, || {
        Context::open_interface("oxvb").expect("device on oxvb")
    });
    let ia = in_ns(&na, || oxrdma::interfaces::interface("oxva").unwrap());
    let mac = ia.mac.expect("a veth has a MAC address");
    let g = |s: &str| oxrdma::Gid::from(s.parse::<std::net::IpAddr>().unwrap());
    let want = [
        oxrdma::interfaces::default_gid(mac),
        g("10.199.0.1"),
        g("fd99::1"),
    ];
    assert_eq!(a.gids(), want, "rxe's order");
    // The kernel made the same link-local address from the MAC address.
    assert!(ia.addrs.contains(&want[0].ip()), "{ia:?}");
    assert_eq!(a.gid(), g("10.199.0.1"), "the main GID is the IPv4 one");
    assert_eq!(a.active_mtu(), Mtu::Mtu1024);
    for index in [1, 2, 0] {
        transfer(&a, &b, Some(index), &format!("GID {index}"));
    }
    ud_from(&a, &b, 2);
    // A GID of the other family than the peer's, or past the table, is refused at once.
    let pd = a.alloc_pd().unwrap();
    let bad = oxrdma::AddressVector {
        dgid: g("10.199.0.2"),
        sgid_index: 2,
    };
    assert!(pd.create_ah_av(bad).is_err());
    let past = oxrdma::AddressVector {
        dgid: g("10.199.0.2"),
        sgid_index: 3,
    };
    assert!(pd.create_ah_av(past).is_err());
}

/// A UD SEND from `a`'s GID `index` to `b`'s GID of the same index; `b`'s receive shows
/// the source and destination GIDs in its GRH area.
fn ud_from(a: &Context, b: &Context, index: u8) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Ud, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Ud, QpCap::default())
        .unwrap();
    qa.ready_ud(0x1234).unwrap();
    qb.ready_ud(0x1234).unwrap();
    let (ma, mb) = (
        pa.register(4096, Access::ALL).unwrap(),
        pb.register(4096, Access::ALL).unwrap(),
    );
    qb.post_recv(oxrdma::RecvWr {
        wr_id: 7,
        sges: vec![mb.sge(0, 1024).unwrap()].into(),
    })
    .unwrap();
    let dgid = b.gids()[usize::from(index)];
    let ah = pa
        .create_ah_av(oxrdma::AddressVector {
            dgid,
            sgid_index: index,
        })
        .unwrap();
    ma.write(0, b"from the IPv6 GID").unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::Send,
        SendData::Sges(vec![ma.sge(0, 17).unwrap()].into()),
    );
    w.ud = Some(oxrdma::UdDest {
        ah: ah.id(),
        remote_qpn: qb.qpn(),
        remote_qkey: 0x1234,
    });
    qa.post_send(w).unwrap();
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while wcs.is_empty() {
        assert!(Instant::now() < deadline, "UD receive timed out");
        cb.poll(&mut wcs, 1).unwrap();
    }
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
    let mut grh = [0u8; 40];
    mb.read(0, &mut grh).unwrap();
    assert_eq!(&grh[8..24], &a.gids()[usize::from(index)].0, "GRH source");
    assert_eq!(&grh[24..40], &dgid.0, "GRH destination");
    let mut body = [0u8; 17];
    mb.read(40, &mut body).unwrap();
    assert_eq!(&body, b"from the IPv6 GID");
}

/// WRITE 1 MiB from `a` to `b` and READ it back, checking every byte both ways (each QP
/// on its device's GID `gid_index`, if given).
fn transfer(a: &Context, b: &Context, gid_index: Option<u8>, label: &str) {
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.register(2 << 20, Access::ALL).unwrap(),
        pb.register(1 << 20, Access::ALL).unwrap(),
    );
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc, QpCap::default())
        .unwrap();
    let end = |q: &oxrdma::QueuePair| match gid_index {
        Some(i) => q.endpoint_at(i).expect("the GID table has it"),
        None => q.endpoint(),
    };
    // More than the port can carry is refused when the QP is connected.
    let too_big = ConnectOptions {
        mtu: Mtu::Mtu4096,
        gid_index,
        ..Default::default()
    };
    assert!(qa.connect(&end(&qb), &too_big).is_err());
    qa.modify(&oxrdma::QpAttr {
        qp_state: Some(oxrdma::QpState::Reset),
        ..Default::default()
    })
    .unwrap();
    let o = ConnectOptions {
        mtu: a.active_mtu(),
        gid_index,
        ..Default::default()
    };
    qa.connect(&end(&qb), &o).unwrap();
    qb.connect(&end(&qa), &o).unwrap();
    let data: Vec<u8> = (0..(1 << 20)).map(|i: usize| (i % 241) as u8).collect();
    ma.write(0, &data).unwrap();
    let mut w = SendWr::new(
        1,
        WrOpcode::RdmaWrite,
        SendData::Sges(vec![ma.sge(0, data.len()).unwrap()].into()),
    );
    (w.remote_addr, w.rkey) = (mb.addr(), mb.rkey());
    qa.post_send(w).unwrap();
    let mut r = SendWr::new(
        2,
        WrOpcode::RdmaRead,
        SendData::Sges(vec![ma.sge(1 << 20, data.len()).unwrap()].into()),
    );
    (r.remote_addr, r.rkey) = (mb.addr(), mb.rkey());
    qa.post_send(r).unwrap();
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while wcs.len() < 2 {
        assert!(Instant::now() < deadline, "{label}: timed out: {wcs:?}");
        ca.poll(&mut wcs, 2).unwrap();
    }
    assert!(
        wcs.iter().all(|w| w.status == WcStatus::Success),
        "{label}: {wcs:?}"
    );
    let mut back = vec![0u8; data.len()];
    ma.read(1 << 20, &mut back).unwrap();
    assert!(back == data);
    let mut got = vec![0u8; data.len()];
    mb.read(0, &mut got).unwrap();
    assert!(got == data);
}

/// A QP whose peer no route reaches (a host without a route: ENETUNREACH at each send)
/// ends in RETRY_EXC within its retry budget, and the device goes on serving its other QPs.
#[test]
fn a_qp_to_an_unreachable_peer_ends_in_retry_exc_and_the_device_goes_on() {
    let Some((_guard, na, nb)) = two_hosts("a_qp_to_an_unreachable_peer", "u") else {
        return;
    };
    let a = in_ns(&na, || {
        Context::open_interface("oxva").expect("device on oxva")
    });
    let b = in_ns(&nb, || {
        Context::open_interface("oxvb").expect("device on oxvb")
    });
    for far in ["10.94.0.9", "fd95::9"] {
        let pd = a.alloc_pd().unwrap();
        let cq = a.create_cq(4).unwrap();
        let qp = pd
            .create_qp(&cq, &cq, QpType::Rc, QpCap::default())
            .unwrap();
        let mr = pd.register(4096, Access::ALL).unwrap();
        let nowhere = oxrdma::Endpoint {
            gid: oxrdma::Gid::from(far.parse::<std::net::IpAddr>().unwrap()),
            qpn: 0x1234,
            psn: 0,
            key: None,
            buffers: Vec::new(),
        };
        // 4.096 us x 2^10 = 4 ms an attempt, 3 retries.
        let o = ConnectOptions {
            mtu: Mtu::Mtu1024,
            timeout: 10,
            retry_cnt: 3,
            ..Default::default()
        };
        qp.connect(&nowhere, &o).unwrap();
        let mut w = SendWr::new(
            9,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![mr.sge(0, 64).unwrap()].into()),
        );
        (w.remote_addr, w.rkey) = (0x1000, 0x77);
        let start = Instant::now();
        qp.post_send(w).unwrap();
        let mut wcs = Vec::new();
        while wcs.is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{far}: no completion"
            );
            cq.poll(&mut wcs, 1).unwrap();
        }
        assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{far}: {wcs:?}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{far}: {:?}",
            start.elapsed()
        );
    }
    transfer(&a, &b, None, "after the unreachable peers");
}

/// Runs `cmd ARGS` inside namespace `ns` with `input` on its standard input; whether it
/// succeeded.
fn ns_exec(ns: &str, cmd: &[&str], input: &str) -> bool {
    use std::io::Write;
    let Ok(mut child) = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .stdin(std::process::Stdio::piped())
        .spawn()
    else {
        return false;
    };
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait().is_ok_and(|s| s.success())
}

/// Packets nftables dropped in namespace `ns` (its `oxrloss` table's counter).
fn nft_dropped(ns: &str) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "nft", "list", "table", "inet", "oxrloss",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// RC across a lossy, reordering path: in each namespace nftables drops 2 % of the RoCE
/// packets it sends (`numgen random`), and netem on each veth, where the kernel has it,
/// holds three quarters of the packets 1 ms so that the others overtake them. WRITEs, READs and SENDs of 1 B to 256 KiB,
/// each checked byte for byte, every work request completing once, in order, successfully.
#[test]
fn rc_through_random_loss_and_reordering() {
    let test = "rc_through_random_loss_and_reordering";
    if Command::new("nft").arg("--version").output().is_err() {
        assert!(std::env::var_os("OXRDMA_CI").is_none(), "nft is missing");
        eprintln!("SKIPPED {test}: nft (nftables) is not installed");
        return;
    }
    let Some((_guard, na, nb)) = two_hosts(test, "l") else {
        return;
    };
    let rules = "table inet oxrloss {\n chain out {\n  type filter hook output priority 0; \
                 policy accept;\n  udp dport 4791 numgen random mod 100 < 2 counter drop\n }\n}\n";
    let mut reordering = true;
    for (ns, dev) in [(&na, "oxva"), (&nb, "oxvb")] {
        assert!(ns_exec(ns, &["nft", "-f", "-"], rules), "nft in {ns}");
        // netem is a kernel module some kernels lack (this machine's does): then loss alone
        // here (the simulator, and the interop rows with netem in the guest, reorder).
        let netem = [
            "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms", "reorder", "25%",
            "50%",
        ];
        reordering &= ns_exec(ns, &netem, "");
    }
    if !reordering {
        eprintln!("{test}: no netem in this kernel: loss without reordering");
    }
    let a = open_in(&na, "10.199.0.1");
    let b = open_in(&nb, "10.199.0.2");
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.register(2 << 20, Access::ALL).unwrap(),
        pb.register(1 << 20, Access::ALL).unwrap(),
    );
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let qa = pa
        .create_qp(&ca, &ca, QpType::Rc, QpCap::default())
        .unwrap();
    let qb = pb
        .create_qp(&cb, &cb, QpType::Rc, QpCap::default())
        .unwrap();
    let o = ConnectOptions {
        mtu: a.active_mtu(),
        ..Default::default()
    };
    qa.connect(&qb.endpoint(), &o).unwrap();
    qb.connect(&qa.endpoint(), &o).unwrap();
    let sizes = [1usize, 100, 4096, 65_536, 262_144];
    let wait = |cq: &oxrdma::CompletionQueue, id: u64| {
        let mut wcs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while wcs.is_empty() {
            assert!(Instant::now() < deadline, "WR {id} never completed");
            cq.poll(&mut wcs, 1).unwrap();
        }
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status),
            (id, WcStatus::Success),
            "{wcs:?}"
        );
    };
    for i in 0..60u64 {
        let len = sizes[i as usize % sizes.len()];
        let data: Vec<u8> = (0..len).map(|j| (j as u64 * 7 + i) as u8).collect();
        ma.write(0, &data).unwrap();
        // WRITE it over, READ it back elsewhere, SEND it into a receive.
        let mut w = SendWr::new(
            3 * i,
            WrOpcode::RdmaWrite,
            SendData::Sges(vec![ma.sge(0, len).unwrap()].into()),
        );
        w.flags = oxrdma::SendFlags::SIGNALED;
        (w.remote_addr, w.rkey) = (mb.addr(), mb.rkey());
        qa.post_send(w).unwrap();
        wait(&ca, 3 * i);
        let mut r = SendWr::new(
            3 * i + 1,
            WrOpcode::RdmaRead,
            SendData::Sges(vec![ma.sge(1 << 20, len).unwrap()].into()),
        );
        r.flags = oxrdma::SendFlags::SIGNALED;
        (r.remote_addr, r.rkey) = (mb.addr(), mb.rkey());
        qa.post_send(r).unwrap();
        wait(&ca, 3 * i + 1);
        let mut back = vec![0u8; len];
        ma.read(1 << 20, &mut back).unwrap();
        assert!(back == data, "READ {i} of {len} B brought other bytes");
        qb.post_recv(oxrdma::RecvWr {
            wr_id: 3 * i + 2,
            sges: vec![mb.sge(512 << 10, len).unwrap()].into(),
        })
        .unwrap();
        let mut s = SendWr::new(
            3 * i + 2,
            WrOpcode::Send,
            SendData::Sges(vec![ma.sge(0, len).unwrap()].into()),
        );
        s.flags = oxrdma::SendFlags::SIGNALED;
        qa.post_send(s).unwrap();
        wait(&ca, 3 * i + 2);
        wait(&cb, 3 * i + 2);
        let mut got = vec![0u8; len];
        mb.read(512 << 10, &mut got).unwrap();
        assert!(got == data, "SEND {i} of {len} B arrived as other bytes");
    }
    // Nothing more completes: each WR once.
    let mut extra = Vec::new();
    std::thread::sleep(Duration::from_millis(50));
    ca.poll(&mut extra, 8).unwrap();
    cb.poll(&mut extra, 8).unwrap();
    assert!(extra.is_empty(), "{extra:?}");
    let dropped = nft_dropped(&na) + nft_dropped(&nb);
    let resent =
        a.counters()[oxrdma::Counter::Retransmitted] + b.counters()[oxrdma::Counter::Retransmitted];
    println!(
        "{test}: 180 WRs completed once each, data intact; nftables dropped {dropped} \
         packets, the devices sent {resent} again; reordering {reordering}"
    );
    assert!(dropped > 0, "the loss rules dropped nothing");
    assert!(resent > 0);
}
