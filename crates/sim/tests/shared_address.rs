//! Several processes of one host behind its one address, on the simulated network: each
//! engine owns a slot and draws its QPNs and comm IDs there, and the address's packets go
//! to the engine the kernel's steering rule names (`oxrdma_core::slot::steer`, which
//! `oxrdma_udp::steer` compiles to classic BPF). Seeded; the seed is in every message.

use oxrdma_core::cm::CmEventKind;
use oxrdma_core::{Gid, RxDrop, SendWr, Slot, WcStatus};
use oxrdma_sim::cm::{accept_params, rc_params};
use oxrdma_sim::pair::{connect, connect_attrs, end};
use oxrdma_sim::{End, NetConfig, PairOptions, World};

/// Hosts 0 and 1 alone (10.0.0.1, 10.0.0.2); hosts 2-5 four processes sharing 10.0.0.3.
const SHARED: std::ops::Range<usize> = 2..6;

fn world(seed: u64, loss: f64) -> World {
    let net = NetConfig {
        loss,
        ..NetConfig::default()
    };
    World::with_shared(6, SHARED.len(), net, seed)
}

fn options(seed: u64) -> PairOptions {
    PairOptions {
        seed,
        sq_sig_all: true,
        ..PairOptions::default()
    }
}

fn write(from: &End, to: &End, wr_id: u64, len: usize) -> SendWr {
    from.write_to(to, wr_id, len)
}

fn run(w: &mut World) {
    let limit = w.now + 100_000_000_000;
    w.run_until_idle(limit);
}

fn drops(w: &World, node: usize, why: RxDrop) -> u64 {
    w.nodes[node].engine.stats().rx_drops.get(why)
}

/// Host 0 writes 64 KiB to each of the four processes (one QP each, each with its own
/// pattern) over a lossy network: every write lands at its own process and nowhere else,
/// and no process sees a packet that is not its own.
#[test]
fn processes_behind_one_address_each_get_their_own_packets() {
    for seed in [1, 7, 42] {
        let mut w = world(seed, 0.02);
        let o = options(seed);
        let key = w.nodes[SHARED.start]
            .engine
            .config()
            .slot
            .expect("a slot")
            .key;
        let mut pairs = Vec::new();
        for p in SHARED {
            let (mut a, mut b) = (end(&mut w, 0, &o), end(&mut w, p, &o));
            connect(&mut w, &o, &mut a, &mut b);
            let slot = (p - SHARED.start) as u32;
            assert_eq!(
                Slot::of_qpn(key, b.qpn),
                slot,
                "seed {seed}: QPN in its slot"
            );
            let pattern: Vec<u8> = (0..65536)
                .map(|i| (i as u32 * 7 + p as u32) as u8)
                .collect();
            assert!(a.buf.write(0, &pattern));
            pairs.push((a, b, pattern));
        }
        for (i, (a, b, _)) in pairs.iter().enumerate() {
            w.nodes[0]
                .engine
                .post_send(a.qpn, write(a, b, i as u64, 65536))
                .unwrap();
        }
        run(&mut w);
        for (i, (a, b, pattern)) in pairs.iter().enumerate() {
            let wcs = w.nodes[0].engine.poll_cq(a.cq, 8).unwrap();
            assert_eq!(wcs.len(), 1, "seed {seed}: {wcs:?}");
            assert_eq!(wcs[0].status, WcStatus::Success, "seed {seed} QP {i}");
            assert!(
                b.read(0, 65536) == *pattern,
                "seed {seed}: process {} got another's bytes",
                b.node
            );
        }
        for p in SHARED {
            for why in [RxDrop::UnknownQp, RxDrop::WrongPeer] {
                assert_eq!(drops(&w, p, why), 0, "seed {seed}: process {p} saw {why:?}");
            }
        }
    }
}

/// Bad input to the shared address: a packet for a QPN of a slot no process holds goes to
/// the default process (the lowest slot), which drops it and counts it; a packet that
/// names a process's QPN from a host that is not its peer (a forged owner) is dropped and
/// counted by that process, whose memory stays as it was; both senders end in RETRY_EXC.
#[test]
fn a_packet_for_no_one_and_a_forged_owner_are_dropped_and_counted() {
    for seed in [3, 11] {
        let mut w = world(seed, 0.0);
        let o = options(seed);
        let key = w.nodes[SHARED.start].engine.config().slot.unwrap().key;
        let shared_gid = Gid::from(w.nodes[SHARED.start].ip);
        // A real connection to process 3, to be forged against.
        let (mut a, mut b) = (end(&mut w, 0, &o), end(&mut w, 3, &o));
        connect(&mut w, &o, &mut a, &mut b);
        assert!(b.buf.write(0, &[0xee; 256]));
        // Host 1's QPs: one towards a QPN of slot 40 (nobody's), one towards process 3's QP.
        let nobody = end(&mut w, 1, &o);
        let forger = end(&mut w, 1, &o);
        let ghost_qpn = Slot::new(40, key).qpn(seed as u32);
        for (from, to_qpn) in [(&nobody, ghost_qpn), (&forger, b.qpn)] {
            let attrs = connect_attrs(&o, shared_gid, to_qpn, b.sq_psn, from.sq_psn);
            for attr in attrs {
                w.nodes[1].engine.modify_qp(from.qpn, &attr).unwrap();
            }
        }
        assert!(nobody.buf.write(0, &[0x11; 64]) && forger.buf.write(0, &[0x22; 64]));
        w.nodes[1]
            .engine
            .post_send(nobody.qpn, write(&nobody, &b, 1, 64))
            .unwrap();
        w.nodes[1]
            .engine
            .post_send(forger.qpn, write(&forger, &b, 2, 64))
            .unwrap();
        run(&mut w);
        let default = SHARED.start;
        assert!(
            drops(&w, default, RxDrop::UnknownQp) > 0,
            "seed {seed}: not counted"
        );
        assert!(
            drops(&w, 3, RxDrop::WrongPeer) > 0,
            "seed {seed}: forged not counted"
        );
        assert_eq!(
            b.read(0, 256),
            vec![0xee; 256],
            "seed {seed}: the forger wrote"
        );
        for (qp, cq) in [(nobody.qpn, nobody.cq), (forger.qpn, forger.cq)] {
            let wcs = w.nodes[1].engine.poll_cq(cq, 8).unwrap();
            assert_eq!(wcs.len(), 1, "seed {seed} QP {qp:#x}: {wcs:?}");
            assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "seed {seed}");
        }
        // Process 3's own connection still works.
        assert!(a.buf.write(0, &[0x5a; 128]));
        w.nodes[0]
            .engine
            .post_send(a.qpn, write(&a, &b, 9, 128))
            .unwrap();
        run(&mut w);
        assert_eq!(b.read(0, 128), vec![0x5a; 128], "seed {seed}");
    }
}

/// The CM through the shared address: a REQ goes to the process listening on its service
/// ID (not to the default), and the REP and RTU of the exchange follow their comm IDs.
#[test]
fn a_connection_request_reaches_the_listening_process_among_four() {
    for seed in [5, 9] {
        let mut w = world(seed, 0.0);
        let listener = SHARED.start + 2;
        let sid = 0x0106_0000_0000_4e21;
        w.nodes[listener].engine.cm_mut().listen(sid, 4).unwrap();
        let (src, dst) = (Gid::from(w.nodes[0].ip), Gid::from(w.nodes[listener].ip));
        let now = w.now;
        let id = w.nodes[0]
            .engine
            .cm_mut()
            .connect(now, &rc_params(src, dst, sid, 0x33))
            .unwrap();
        let mut established = false;
        let limit = w.now + 60_000_000_000;
        while w.step(limit) {
            for n in 0..w.nodes.len() {
                while let Some(e) = w.nodes[n].engine.poll_cm_event() {
                    match e.kind {
                        CmEventKind::ConnectRequest { .. } => {
                            assert_eq!(n, listener, "seed {seed}: the REQ went to {n}");
                            let now = w.now;
                            w.nodes[n]
                                .engine
                                .cm_mut()
                                .accept(now, e.id, &accept_params(0x44))
                                .unwrap();
                        }
                        CmEventKind::Reply { .. } => {
                            assert_eq!((n, e.id), (0, id), "seed {seed}");
                            w.nodes[0].engine.cm_mut().establish(id).unwrap();
                        }
                        CmEventKind::Established => {
                            assert_eq!(n, listener, "seed {seed}");
                            established = true;
                        }
                        other => panic!("seed {seed}: node {n}: {other:?}"),
                    }
                }
            }
        }
        assert!(established, "seed {seed}: never established");
        for p in SHARED {
            assert_eq!(
                w.nodes[p].engine.cm().stats().ignored,
                0,
                "seed {seed}: {p}"
            );
        }
    }
}
