//! Secure QPs (`oxrdma_core::secure`) on the simulated network: random workloads of every
//! operation over loss, duplication, reordering and corruption complete exactly once with
//! exact bytes; what crosses the wire shows no rkey, address or payload; a tampered,
//! forged or replayed packet is dropped and counted, never placed; a plain peer gets
//! nothing through. Each failure names its seed.

use oxrdma_core::secure::{Suite, TRAILER};
use oxrdma_core::{Counter, Gid, SendData, SendWr, WcStatus, WrOpcode};
use oxrdma_sim::pair::{Pair, PairOptions};
use oxrdma_sim::scenario::{run, Expect, ScenarioConfig};
use oxrdma_sim::{seeds, NetConfig, Tap, TapAction};
use std::cell::RefCell;
use std::rc::Rc;

#[test]
fn secure_pairs_complete_every_operation_once_over_a_bad_network() {
    for seed in seeds(0x5ec0, 24) {
        let mut cfg = ScenarioConfig::new(seed);
        cfg.secure = 1.0;
        // Half the runs take many packets per call: the send run path, sealed packet by
        // packet.
        cfg.tx_slots = if seed % 2 == 0 { 32 } else { 1 };
        cfg.net = NetConfig {
            loss: 0.02,
            duplicate: 0.02,
            reorder: 0.05,
            corrupt: 0.01,
            delay: 20_000,
            jitter: 10_000,
            ..NetConfig::default()
        };
        cfg.expect = Expect::RetryErrorsAllowed;
        let r = run(&cfg);
        assert!(r.violations.is_empty(), "seed {seed}: {:?}", r.violations);
        assert!(r.succeeded > 0, "seed {seed}: nothing succeeded");
    }
}

/// Packets as sent: the sending node and the bytes.
type Recorded = Rc<RefCell<Vec<(usize, Vec<u8>)>>>;

/// Every packet between the two nodes, as sent.
fn record(p: &mut Pair) -> Recorded {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        s.borrow_mut().push((d.from, d.data.clone()));
        TapAction::Pass
    })));
    seen
}

fn secure_pair(suite: Suite) -> Pair {
    Pair::new(&PairOptions {
        secure: [true; 2],
        suite,
        sq_sig_all: true,
        ..PairOptions::default()
    })
}

fn counter(p: &Pair, node: usize, c: Counter) -> u64 {
    p.world.nodes[node].engine.counters()[c]
}

#[test]
fn the_wire_shows_no_rkey_address_or_payload() {
    for suite in Suite::ALL {
        let mut p = secure_pair(suite);
        let seen = record(&mut p);
        let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
        p.a.buf.write(0, &pattern);
        let w = p.a.write_to(&p.b, 1, 8192);
        let (rkey, addr) = (w.rkey, w.remote_addr);
        p.post_send(0, w);
        let mut read = SendWr::new(
            2,
            WrOpcode::RdmaRead,
            SendData::Sges(vec![p.a.sge(16384, 8192)].into()),
        );
        (read.remote_addr, read.rkey) = (addr, rkey);
        p.post_send(0, read);
        p.post_recv(1, 3, vec![p.b.sge(32768, 8192)]);
        p.post_send(
            0,
            SendWr::new(
                4,
                WrOpcode::Send,
                SendData::Sges(vec![p.a.sge(0, 8192)].into()),
            ),
        );
        p.run();
        let ok = |wcs: Vec<oxrdma_core::WorkCompletion>| {
            wcs.iter().all(|w| w.status == WcStatus::Success) && !wcs.is_empty()
        };
        let (w0, w1) = (p.wcs(0), p.wcs(1));
        assert!(ok(w0.clone()) && ok(w1.clone()), "{suite:?}: {w0:?} {w1:?}");
        assert_eq!(p.b.read(0, 8192), pattern, "{suite:?}: the WRITE");
        assert_eq!(p.a.read(16384, 8192), pattern, "{suite:?}: the READ");
        assert_eq!(p.b.read(32768, 8192), pattern, "{suite:?}: the SEND");
        let packets = seen.borrow();
        assert!(packets.len() > 20, "{suite:?}: {} packets", packets.len());
        let secrets: [(&str, Vec<u8>); 3] = [
            ("the rkey", rkey.to_be_bytes().to_vec()),
            ("the address", addr.to_be_bytes().to_vec()),
            ("16 payload bytes", pattern[1000..1016].to_vec()),
        ];
        for (from, data) in packets.iter() {
            for (what, s) in &secrets {
                assert!(
                    !data.windows(s.len()).any(|w| w == &s[..]),
                    "{suite:?}: {what} in a packet from node {from}"
                );
            }
        }
    }
}

/// A responder a program leaves in RTR, keyed in two steps (receive and reply keys, no
/// send key: perftest's bandwidth servers under `OXRDMA_SECURE_KEY`), still answers: a
/// WRITE is acknowledged and a READ answered, under its reply key.
#[test]
fn a_secure_responder_left_in_rtr_answers() {
    for suite in Suite::ALL {
        let mut p = Pair::new(&PairOptions {
            secure: [true; 2],
            suite,
            rtr_only: [false, true],
            sq_sig_all: true,
            ..PairOptions::default()
        });
        let pattern: Vec<u8> = (0..8192).map(|i| (i % 253) as u8).collect();
        p.a.buf.write(0, &pattern);
        p.post_send(0, p.a.write_to(&p.b, 1, pattern.len()));
        p.run();
        assert_eq!(p.b.read(0, pattern.len()), pattern, "{suite:?}");
        p.b.buf.write(65536, &[7; 4096]);
        let mut read = p.a.write_to(&p.b, 2, 4096);
        read.opcode = oxrdma_core::WrOpcode::RdmaRead;
        read.remote_addr = p.b.addr(65536);
        p.post_send(0, read);
        p.run();
        let wcs = p.wcs(0);
        assert_eq!(wcs.len(), 2, "{suite:?}: {wcs:?}");
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "{suite:?}: {wcs:?}"
        );
        assert_eq!(
            p.a.read(0, 4096),
            vec![7; 4096],
            "{suite:?}: the READ's bytes"
        );
        assert_eq!(counter(&p, 0, Counter::AuthFailed), 0, "{suite:?}");
    }
}

/// A driver that takes many packets at once gets a message's middle packets in runs; a
/// secure QP's are sealed where they were built: on a clean network each opens at the
/// first try, none is sent again.
#[test]
fn a_secure_qps_runs_open_at_the_first_try() {
    for suite in Suite::ALL {
        let mut p = secure_pair(suite);
        p.world.tx_slots = 32;
        let pattern: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
        p.a.buf.write(0, &pattern);
        p.post_send(0, p.a.write_to(&p.b, 1, pattern.len()));
        p.run();
        let wcs = p.wcs(0);
        assert_eq!(
            (wcs.len(), wcs[0].status),
            (1, WcStatus::Success),
            "{suite:?}"
        );
        assert_eq!(p.b.read(0, pattern.len()), pattern, "{suite:?}");
        let e = &p.world.nodes[0].engine;
        assert!(e.stats().tx_run > 0, "{suite:?}: no run was built");
        assert_eq!(counter(&p, 1, Counter::AuthFailed), 0, "{suite:?}");
        assert_eq!(counter(&p, 0, Counter::Retransmitted), 0, "{suite:?}");
    }
}

#[test]
fn tampered_forged_and_replayed_packets_are_dropped_counted_and_never_placed() {
    for suite in Suite::ALL {
        tampered_forged_and_replayed(suite);
    }
}

fn tampered_forged_and_replayed(suite: Suite) {
    let mut p = secure_pair(suite);
    let seen = record(&mut p);
    let pattern = vec![0x5a; 4096];
    p.a.buf.write(0, &pattern);
    p.post_send(0, p.a.write_to(&p.b, 1, 4096));
    p.run();
    assert_eq!(p.b.read(0, 4096), pattern);
    assert_eq!(p.wcs(0).len(), 1);
    // The WRITE's packets, as an on-path attacker saw them, sent again: taken once already.
    let writes: Vec<Vec<u8>> = seen
        .borrow()
        .iter()
        .filter(|(from, d)| *from == 0 && d.len() > 1024)
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(writes.len(), 4, "4 KiB at MTU 1024");
    p.b.buf.write(0, &[0; 4096]);
    let ga = Gid::from(p.world.nodes[0].ip);
    for w in &writes {
        let now = p.world.now;
        p.world.nodes[1].engine.handle_packet(now, ga, w);
    }
    assert_eq!(counter(&p, 1, Counter::Replayed), 4);
    // The next WRITE's first packet is held back by the attacker, who sends altered copies
    // of it first: each has a number the receiver has not seen.
    let held = Rc::new(RefCell::new(None));
    let h = held.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        if d.from == 0 && d.data.len() > 1024 && h.borrow().is_none() {
            *h.borrow_mut() = Some(d.data.clone());
            return TapAction::Drop;
        }
        TapAction::Pass
    })));
    p.post_send(0, p.a.write_to(&p.b, 2, 4096));
    while held.borrow().is_none() {
        let until = p.world.now + 1_000_000_000;
        assert!(p.world.step(until), "the WRITE never left");
    }
    let first = held.borrow().clone().unwrap();
    let n = first.len();
    let now = p.world.now;
    let engine = &mut p.world.nodes[1].engine;
    // One bit of the ciphertext, of the sequence number, of the BTH's PSN.
    for at in [12 + 20, n - 4 - TRAILER + 7, 11] {
        let mut t = first.clone();
        t[at] ^= 0x10;
        engine.handle_packet(now, ga, &t);
    }
    // Forged in the clear: a WRITE at the right QPN and PSN, as an on-path attacker reads
    // them.
    let mut forged = first[..n - 4 - TRAILER].to_vec();
    forged.extend_from_slice(&[0; 4]);
    engine.handle_packet(now, ga, &forged);
    assert_eq!(counter(&p, 1, Counter::AuthFailed), 4);
    assert_eq!(p.b.read(0, 4096), vec![0; 4096], "nothing placed");
    // The genuine packet, and the connection goes on.
    p.world.nodes[1].engine.handle_packet(now, ga, &first);
    p.run();
    let wcs = p.wcs(0);
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    assert!(p.wcs(1).is_empty());
    assert_eq!(p.b.read(0, 4096), pattern);
    assert_eq!(counter(&p, 1, Counter::AuthFailed), 4);
}

#[test]
fn a_plain_end_and_a_secure_end_exchange_nothing() {
    for secure in [[true, false], [false, true]] {
        let mut p = Pair::new(&PairOptions {
            secure,
            sq_sig_all: true,
            ..PairOptions::default()
        });
        p.a.buf.write(0, &[9; 64]);
        p.post_send(0, p.a.write_to(&p.b, 1, 64));
        p.run();
        let wcs = p.wcs(0);
        assert_eq!(wcs.len(), 1, "{secure:?}");
        assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{secure:?}");
        // What the secure end took in was not sealed; what the plain end took in was a
        // sealed packet it parsed as a WRITE it could not honour, or an ACK it could not
        // match: nothing placed either way.
        let secure_end = if secure[0] { 0 } else { 1 };
        assert!(
            counter(&p, secure_end, Counter::AuthFailed) > 0,
            "{secure:?}"
        );
        assert_eq!(p.b.read(0, 64), vec![0; 64], "{secure:?}");
    }
}

#[test]
fn a_secure_uc_pair_places_what_arrives_whole_and_nothing_tampered() {
    // UC: no ACKs and no retransmission; what is lost or corrupted is a message lost, and a
    // tampered packet must not be placed where a plain UC QP would have placed it.
    for seed in seeds(0x5ec00c, 8) {
        let mut p = Pair::new(&PairOptions {
            seed,
            qp_type: oxrdma_core::QpType::Uc,
            secure: [true; 2],
            sq_sig_all: true,
            net: NetConfig {
                loss: 0.05,
                reorder: 0.05,
                corrupt: 0.05,
                delay: 20_000,
                jitter: 10_000,
                ..NetConfig::default()
            },
            ..PairOptions::default()
        });
        let seen = record(&mut p);
        let n = 40usize;
        for i in 0..n {
            let at = i * 2048;
            let data: Vec<u8> = (0..2048).map(|j| (i * 31 + j * 7 + 1) as u8).collect();
            p.a.buf.write(at, &data);
            let mut w = p.a.write_to(&p.b, i as u64, 2048);
            w.data = SendData::Sges(vec![p.a.sge(at, 2048)].into());
            w.remote_addr = p.b.addr(at);
            p.post_send(0, w);
        }
        p.run();
        let wcs = p.wcs(0);
        assert_eq!(
            wcs.len(),
            n,
            "seed {seed}: every WRITE completes at the sender"
        );
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::Success),
            "seed {seed}"
        );
        // Each message is whole or absent (UC drops a message with a gap), never altered.
        let mut whole = 0;
        for i in 0..n {
            let got = p.b.read(i * 2048, 2048);
            let want: Vec<u8> = (0..2048).map(|j| (i * 31 + j * 7 + 1) as u8).collect();
            if got == want {
                whole += 1;
            } else {
                assert!(
                    got.iter().all(|&b| b == 0)
                        || got.iter().zip(&want).all(|(g, w)| g == w || *g == 0),
                    "seed {seed}: message {i} holds bytes nobody sent"
                );
            }
        }
        assert!(whole > n / 2, "seed {seed}: only {whole} of {n} arrived");
        let payload = p.a.read(1000, 16);
        assert!(
            !seen
                .borrow()
                .iter()
                .any(|(_, d)| d.windows(16).any(|w| w == &payload[..])),
            "seed {seed}: payload on the wire"
        );
        println!("seed {seed}: {whole} of {n} whole");
    }
    // An on-path attacker alters each packet of a UC WRITE (the ICRC is no obstacle to
    // one: handed to the engine past its check): nothing is placed, each is counted.
    let mut p = Pair::new(&PairOptions {
        qp_type: oxrdma_core::QpType::Uc,
        secure: [true; 2],
        sq_sig_all: true,
        ..PairOptions::default()
    });
    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    p.world.tap = Some(Tap(Box::new(move |d| {
        s.borrow_mut().push(d.data.clone());
        TapAction::Drop
    })));
    p.a.buf.write(0, &[0x77; 3000]);
    p.post_send(0, p.a.write_to(&p.b, 1, 3000));
    p.run();
    let packets = seen.borrow().clone();
    assert_eq!(packets.len(), 3, "3000 bytes at MTU 1024");
    let ga = Gid::from(p.world.nodes[0].ip);
    let now = p.world.now;
    for (i, pkt) in packets.iter().enumerate() {
        let mut t = pkt.clone();
        t[12 + 3] ^= 0x40;
        p.world.nodes[1].engine.handle_packet(now, ga, &t);
        assert_eq!(counter(&p, 1, Counter::AuthFailed), i as u64 + 1);
    }
    assert_eq!(p.b.read(0, 3000), vec![0; 3000], "nothing placed");
    for pkt in &packets {
        p.world.nodes[1].engine.handle_packet(now, ga, pkt);
    }
    assert_eq!(
        p.b.read(0, 3000),
        vec![0x77; 3000],
        "the genuine packets are"
    );
}
